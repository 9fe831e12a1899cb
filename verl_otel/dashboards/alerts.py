"""Prometheus alert rules from the health signals, generated from semconv names with thresholds as
parameters. ``python -m verl_otel.dashboards.build --threshold kl_max=0.1 --rules-out my-rules.yml``
writes a variant with other thresholds; the committed deploy/prometheus/rules/verl-alerts.yml uses the
defaults below (documented in deploy/README.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

from verl_otel import semconv as sc
from verl_otel.dashboards.model import DCGM_FB_FREE, DCGM_FB_USED

BY = f"{sc.LABEL_PROJECT}, {sc.LABEL_EXPERIMENT}, instance"
RUN = f"{sc.LABEL_PROJECT}, {sc.LABEL_EXPERIMENT}"
MEMORY_KEY_RE = "(.+/)?perf/max_memory_reserved_gb"  # actor/perf/... since verl 0.9, perf/... before  # a restarted trainer gets a new instance, not a new run


def duration_seconds(window: str) -> float:
    """A Prometheus duration such as 10m or 1h30m, in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", window)
    if not parts or "".join(n + u for n, u in parts) != window:
        raise ValueError(f"not a Prometheus duration: {window!r}")
    return sum(int(n) * units[u] for n, u in parts)


def _t(default: float | str, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class Thresholds:
    """Every alert threshold, with its default (documented in deploy/README.md; override with --threshold)."""

    step_stall_factor: float = _t(3.0, "VerlStepStalled: no new step for this many mean step times ...")
    step_stall_min_s: float = _t(600.0, "... and at least this many seconds")
    phase_hung_factor: float = _t(5.0, "VerlPhaseHung: the running phase's elapsed time above this many times its "
                                       "mean duration ...")
    phase_hung_min_s: float = _t(900.0, "... and at least this many seconds")
    phase_first_max_s: float = _t(7200.0, "VerlPhaseHungFirstRun: a phase with no finished run yet in this "
                                           "process (the first step, or after a restart) active longer than this")
    rollout_stall_window: str = _t("10m", "VerlRolloutStalled: no sample finished in this window (of an older "
                                          "rollout) while samples are in flight")
    score_zero_window: str = _t("1h", "VerlScoreStuckAtZero: critic/score/mean exactly 0 over this window ...")
    score_zero_min_steps: float = _t(10.0, "... once the run is past this step")
    grad_norm_factor: float = _t(10.0, "VerlGradNormSpike: actor/grad_norm above this many times its 1h median")
    kl_max: float = _t(0.05, "VerlKLBlowUp: actor/ppo_kl or actor/kl_loss above this for 5m (healthy 1e-3..1e-2)")
    entropy_min: float = _t(0.05, "VerlEntropyCollapse: actor/entropy below this for 10m (healthy 0.4-0.6 early)")
    memory_fraction: float = _t(0.95, "VerlGPUMemoryNearLimit: DCGM used/total above this, or ...")
    gpu_memory_gb: float = _t(80.0, "... verl's [actor/]perf/max_memory_reserved_gb above memory_fraction x this "
                                    "(GPU size)")
    step_regression_factor: float = _t(1.5, "VerlStepTimeRegression: 15m mean of timing_s/step above this many "
                                            "times its 6h median")
    run_gone_window: str = _t("1h", "VerlRunGone: a run that reported within this window and vanished short of "
                                    "its planned steps")

    @classmethod
    def with_overrides(cls, pairs: list[str]) -> "Thresholds":
        known = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for pair in pairs:
            name, _, raw = pair.partition("=")
            if name not in known:
                raise ValueError(f"unknown threshold {name!r}; known: {', '.join(known)}")
            values[name] = raw if known[name] in ("str", str) else float(raw)
        out = cls(**values)
        for f in fields(out):
            if f.type in ("str", str):
                duration_seconds(getattr(out, f.name))  # fail here, not later in promtool
        return out


@dataclass(frozen=True)
class Rule:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    cpu_empty: str | None = "fires only when the run is unhealthy (the CPU demo is healthy)"

    def to_dict(self) -> dict[str, Any]:
        return {"alert": self.name, "expr": self.expr, "for": self.for_, "labels": {"severity": self.severity},
                "annotations": {"summary": self.summary, "description": self.description}}


def _k(key: str) -> str:
    return f'{sc.TRAINING_METRIC.name}{{{sc.LABEL_KEY}="{key}"}}'


def rules(t: Thresholds = Thresholds()) -> list[Rule]:
    step, planned = sc.TRAINING_STEP.name, sc.TRAINING_STEPS_PLANNED.name
    hist = sc.STEP_DURATION.name
    phist = sc.PHASE_DURATION.name
    mean_step = f"max by ({BY}) ({hist}_sum / {hist}_count)"
    return [
        Rule("VerlStepStalled",
             f"(time() - max by ({BY}) ({sc.TRAINING_LAST_STEP.name})) > on({BY}) "
             f"clamp_min({t.step_stall_factor:g} * {mean_step}, {t.step_stall_min_s:g}) "
             f"and on({BY}) (max by ({BY}) ({step}) < max by ({BY}) ({planned}))",
             "2m", "critical", "verl run {{ $labels.verl_experiment }}: no new global step",
             f"No step has finished for more than {t.step_stall_factor:g}x the typical step time "
             f"(at least {t.step_stall_min_s:g}s). Check the phase running now: slow or hung?"),
        Rule("VerlPhaseHung",
             # elapsed, active and the histogram come from one process with one label set: match on all labels
             # (on(instance, phase) breaks when two runs share an instance, as they do behind the Collector)
             f"({sc.PHASE_ELAPSED.name} and {sc.PHASE_ACTIVE.name} == 1) > "
             f"clamp_min({t.phase_hung_factor:g} * ({phist}_sum / {phist}_count), {t.phase_hung_min_s:g})",
             "1m", "critical", "phase {{ $labels.phase }} runs far longer than usual",
             f"The running phase's elapsed time is above {t.phase_hung_factor:g}x its mean duration "
             f"(at least {t.phase_hung_min_s:g}s): likely hung (a lost request, a collective waiting)."),
        Rule("VerlPhaseHungFirstRun",
             # VerlPhaseHung compares with the phase's own mean, which does not exist before it finished once
             f"({sc.PHASE_ELAPSED.name} and {sc.PHASE_ACTIVE.name} == 1) > {t.phase_first_max_s:g} "
             f"unless ({phist}_count > 0)",
             "1m", "critical", "phase {{ $labels.phase }} has run for long without ever finishing",
             f"The phase has been running for more than {t.phase_first_max_s:g}s and has not finished once in this "
             f"process (first step or after a restart), so there is no typical duration to compare with."),
        Rule("VerlRolloutStalled",
             # the rollout must be older than the window: changes() over a younger series says nothing
             f"(sum by ({BY}, worker, mode) (changes({sc.ROLLOUT_SAMPLES_COMPLETED.name}[{t.rollout_stall_window}])) "
             f"== 0) and on({BY}, worker, mode) (sum by ({BY}, worker, mode) "
             f"({sc.ROLLOUT_SAMPLES_INFLIGHT.name}) > 0) and on({BY}, worker, mode) (max by ({BY}, worker, mode) "
             f"({sc.ROLLOUT_ELAPSED.name}) > {duration_seconds(t.rollout_stall_window):g})",
             "2m", "warning", "agent-loop worker {{ $labels.worker }}: no sample finished",
             f"No rollout sample finished in the last {t.rollout_stall_window} of a longer rollout while samples are "
             "in flight: a lost request or a stuck server (see verl_rollout_oldest_inflight_seconds)."),
        Rule("VerlScoreStuckAtZero",
             f"(max by ({BY}) (max_over_time({_k('critic/score/mean')}[{t.score_zero_window}])) == 0) "
             f"and on({BY}) (max by ({BY}) ({step}) >= {t.score_zero_min_steps:g})",
             "5m", "warning", "critic/score/mean has been 0",
             f"The score has been exactly 0 for the last {t.score_zero_window} (or since the run started) past step "
             f"{t.score_zero_min_steps:g}: the model learns nothing (reward too strict, answer format never matched)."),
        Rule("VerlGradNormSpike",
             f"{_k('actor/grad_norm')} > {t.grad_norm_factor:g} * "
             f"quantile_over_time(0.5, {_k('actor/grad_norm')}[1h])",
             "0m", "warning", "actor/grad_norm spiked",
             f"The actor's gradient norm is above {t.grad_norm_factor:g}x its 1h median: gradient explosion."),
        Rule("VerlKLBlowUp",
             f'{sc.TRAINING_METRIC.name}{{{sc.LABEL_KEY}=~"actor/ppo_kl|actor/kl_loss"}} > {t.kl_max:g}',
             "5m", "warning", "KL is blowing up ({{ $labels.key }})",
             f"{{{{ $labels.key }}}} above {t.kl_max:g} (healthy: 1e-3..1e-2; ppo_kl: drift per update, kl_loss: "
             "distance to the reference): the policy drifts; lower the temperature or raise the KL coefficient; "
             "check KL is not applied twice (loss and reward)."),
        Rule("VerlEntropyCollapse",
             f"{_k('actor/entropy')} < {t.entropy_min:g}",
             "10m", "warning", "actor/entropy collapsed",
             f"Entropy below {t.entropy_min:g}: the policy stopped exploring."),
        Rule("VerlGPUMemoryNearLimit",
             f"({DCGM_FB_USED} / ({DCGM_FB_USED} + {DCGM_FB_FREE}) > {t.memory_fraction:g}) "
             # verl 0.9 logs it as actor/perf/..., older releases without the prefix
             f'or ({sc.TRAINING_METRIC.name}{{{sc.LABEL_KEY}=~"{MEMORY_KEY_RE}"}} '
             f"> {t.memory_fraction * t.gpu_memory_gb:g})",
             "5m", "warning", "GPU memory near the limit",
             f"GPU memory above {t.memory_fraction:.0%} of the device ({t.gpu_memory_gb:g} GB assumed for "
             "verl's perf/max_memory_reserved_gb): OOM risk."),
        Rule("VerlStepTimeRegression",
             f"avg_over_time({_k('timing_s/step')}[15m]) > {t.step_regression_factor:g} * "
             f"quantile_over_time(0.5, {_k('timing_s/step')}[6h])",
             "15m", "warning", "steps got slower",
             f"The 15-minute mean step time is above {t.step_regression_factor:g}x its 6h median: find the phase "
             "with `verl-otel slow-steps`."),
        Rule("VerlRunGone",
             f"(max by ({RUN}) (max_over_time({step}[{t.run_gone_window}])) < max by ({RUN}) "
             f"(max_over_time({planned}[{t.run_gone_window}]))) unless on({RUN}) max by ({RUN}) ({step})",
             "2m", "critical", "verl run {{ $labels.verl_experiment }} disappeared before its last step",
             f"The run reported steps within {t.run_gone_window} but no longer does, short of its planned steps: "
             "the trainer crashed, was killed (OOM?) or lost its telemetry. Check the driver's log."),
    ]


def rule_groups(t: Thresholds = Thresholds()) -> dict[str, Any]:
    return {"groups": [{"name": "verl-training", "rules": [r.to_dict() for r in rules(t)]}]}
