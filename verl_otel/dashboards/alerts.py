"""Prometheus alert rules from the health signals, generated from semconv names with thresholds as
parameters. ``python -m verl_otel.dashboards.build --threshold kl_max=0.1 --rules-out my-rules.yml``
writes a variant with other thresholds; the committed deploy/prometheus/rules/verl-alerts.yml uses the
defaults below (documented in deploy/README.md)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from verl_otel import semconv as sc

BY = f"{sc.LABEL_PROJECT}, {sc.LABEL_EXPERIMENT}, instance"


@dataclass(frozen=True)
class Thresholds:
    step_stall_factor: float = 3.0  # stalled after this many typical step times without a new step ...
    step_stall_min_s: float = 600.0  # ... and at least this long
    phase_hung_factor: float = 5.0  # a phase running this many times its usual duration ...
    phase_hung_min_s: float = 900.0  # ... and at least this long
    rollout_stall_window: str = "10m"  # no sample finished in this window while some are in flight
    score_zero_window: str = "1h"  # score exactly 0 over this window ...
    score_zero_min_steps: float = 10.0  # ... after at least this many steps
    grad_norm_factor: float = 10.0  # grad norm above this many times its 1h median
    kl_max: float = 0.05  # actor/ppo_kl or actor/kl_loss above this
    entropy_min: float = 0.05  # actor/entropy below this
    memory_fraction: float = 0.95  # GPU memory used / total above this (DCGM) ...
    gpu_memory_gb: float = 80.0  # ... or verl's perf/max_memory_reserved_gb above fraction x this
    step_regression_factor: float = 1.5  # step time (15m mean) above this many times its 6h median

    @classmethod
    def with_overrides(cls, pairs: list[str]) -> "Thresholds":
        known = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for pair in pairs:
            name, _, raw = pair.partition("=")
            if name not in known:
                raise ValueError(f"unknown threshold {name!r}; known: {', '.join(known)}")
            values[name] = raw if known[name] in ("str", str) else float(raw)
        return cls(**values)


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
             f"({sc.PHASE_ELAPSED.name} and on(instance, phase) {sc.PHASE_ACTIVE.name} == 1) > on(instance, phase) "
             f"clamp_min({t.phase_hung_factor:g} * ({phist}_sum / {phist}_count), {t.phase_hung_min_s:g})",
             "1m", "critical", "phase {{ $labels.phase }} runs far longer than usual",
             f"The running phase's elapsed time is above {t.phase_hung_factor:g}x its mean duration "
             f"(at least {t.phase_hung_min_s:g}s): likely hung (a lost request, a collective waiting)."),
        Rule("VerlRolloutStalled",
             f"(sum by ({BY}, worker, mode) (changes({sc.ROLLOUT_SAMPLES_COMPLETED.name}[{t.rollout_stall_window}])) "
             f"== 0) and on({BY}, worker, mode) (sum by ({BY}, worker, mode) "
             f"({sc.ROLLOUT_SAMPLES_INFLIGHT.name}) > 0)",
             "2m", "warning", "agent-loop worker {{ $labels.worker }}: no sample finished",
             f"No rollout sample finished in {t.rollout_stall_window} while samples are in flight "
             "(see verl_rollout_oldest_inflight_seconds; verl #7155)."),
        Rule("VerlScoreStuckAtZero",
             f"(max by ({BY}) (max_over_time({_k('critic/score/mean')}[{t.score_zero_window}])) == 0) "
             f"and on({BY}) (max by ({BY}) ({step}) >= {t.score_zero_min_steps:g})",
             "5m", "warning", "critic/score/mean has been 0",
             f"The score stayed exactly 0 for {t.score_zero_window} after {t.score_zero_min_steps:g}+ steps: "
             "the model learns nothing (reward too strict, answer format never matched)."),
        Rule("VerlGradNormSpike",
             f"{_k('actor/grad_norm')} > {t.grad_norm_factor:g} * "
             f"quantile_over_time(0.5, {_k('actor/grad_norm')}[1h])",
             "0m", "warning", "actor/grad_norm spiked",
             f"The actor's gradient norm is above {t.grad_norm_factor:g}x its 1h median: gradient explosion."),
        Rule("VerlKLBlowUp",
             f'{sc.TRAINING_METRIC.name}{{{sc.LABEL_KEY}=~"actor/ppo_kl|actor/kl_loss"}} > {t.kl_max:g}',
             "5m", "warning", "KL to the reference is blowing up ({{ $labels.key }})",
             f"KL above {t.kl_max:g} (healthy: 1e-3..1e-2): the policy drifts; lower the temperature or raise "
             "the KL coefficient; check KL is not applied twice (loss and reward)."),
        Rule("VerlEntropyCollapse",
             f"{_k('actor/entropy')} < {t.entropy_min:g}",
             "10m", "warning", "actor/entropy collapsed",
             f"Entropy below {t.entropy_min:g}: the policy stopped exploring."),
        Rule("VerlGPUMemoryNearLimit",
             f"(DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) > {t.memory_fraction:g}) "
             f"or ({_k('perf/max_memory_reserved_gb')} > {t.memory_fraction * t.gpu_memory_gb:g})",
             "5m", "warning", "GPU memory near the limit",
             f"GPU memory above {t.memory_fraction:.0%} of the device ({t.gpu_memory_gb:g} GB assumed for "
             "verl's perf/max_memory_reserved_gb): OOM risk."),
        Rule("VerlStepTimeRegression",
             f"avg_over_time({_k('timing_s/step')}[15m]) > {t.step_regression_factor:g} * "
             f"quantile_over_time(0.5, {_k('timing_s/step')}[6h])",
             "15m", "warning", "steps got slower",
             f"The 15-minute mean step time is above {t.step_regression_factor:g}x its 6h median: find the phase "
             "with `verl-otel slow-steps`."),
    ]


def rule_groups(t: Thresholds = Thresholds()) -> dict[str, Any]:
    return {"groups": [{"name": "verl-training", "rules": [r.to_dict() for r in rules(t)]}]}
