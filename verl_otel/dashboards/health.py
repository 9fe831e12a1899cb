"""The health checks of verl's log-reading guides, each declared once: its name on `top`'s health table, the
alert rule(s) Prometheus evaluates (``dashboards/alerts.py`` puts them in deploy/prometheus/rules/), and the
predicate `top` evaluates on a live frame (``live/health_table.py``), both with the same :class:`Thresholds`, so
`top` and Prometheus agree on what trips. Score stuck at 0, gradient-norm spike, KL blow-up, entropy collapse,
memory near the limit, steps getting slower, a phase running far past its mean, a rollout sample stuck, PPO
clipping almost everything."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from verl_otel import semconv as sc
from verl_otel.dashboards.promql import BY, spike, training
from verl_otel.dashboards.rule import Rule
from verl_otel.dashboards.thresholds import Thresholds, duration_seconds

CLIPFRAC_KEY = sc.KEY_PG_CLIPFRAC
KL_KEYS = (sc.KEY_PPO_KL, sc.KEY_KL_LOSS)
GRAD_KEY, SCORE_KEY, ENTROPY_KEY = sc.KEY_ACTOR_GRAD_NORM, sc.KEY_SCORE_MEAN, sc.KEY_ENTROPY
#: the guide's perf/max_memory_allocated_gb as well as the alert rule's reserved memory
MEMORY_KEY = re.compile(sc.KEY_MAX_MEMORY_RESERVED_RE.replace("reserved", "(reserved|allocated)"))
MIN_HISTORY = 3  # steps before a "times its median" comparison means anything


class RolloutWorker(Protocol):
    """An agent-loop worker's rollout as `top` sees it (read-only)."""

    @property
    def rollout_worker(self) -> str: ...
    @property
    def inflight(self) -> float: ...
    @property
    def oldest_inflight_s(self) -> float: ...


class Frame(Protocol):
    """What `top` knows of a running job at one moment (live/health_table.py makes it of its view and history)."""

    @property
    def metrics(self) -> Mapping[str, float]: ...  # verl's last logged scalars
    @property
    def step(self) -> float | None: ...
    @property
    def step_mean_s(self) -> float | None: ...  # from the step duration histogram
    @property
    def active(self) -> Mapping[str, float]: ...  # phase -> elapsed s, running now
    @property
    def phase_mean_s(self) -> Mapping[str, float]: ...
    @property
    def rollout_workers(self) -> Sequence[RolloutWorker]: ...
    @property
    def gpu_memory_gb(self) -> float | None: ...  # the device's size when told (`top --gpu-memory-gb`)
    @property
    def steps_seen(self) -> int: ...  # steps in the history

    def series(self, key: str) -> list[float]: ...  # key's value per step seen, oldest first

    def median(self, key: str) -> float | None: ...  # of the steps before the last


#: (tripped? None: no data; the detail `top` shows)
Verdict = tuple[bool | None, str]


@dataclass(frozen=True)
class HealthCheck:
    name: str  # `top`'s line
    alerts: Callable[[Thresholds], list[Rule]]  # in the rules file's order within its group
    judge: Callable[[Frame, Thresholds], Verdict]


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _score_alerts(t: Thresholds) -> list[Rule]:
    return [
        Rule(
            "VerlScoreStuckAtZero",
            f"(max by ({BY}) (max_over_time({training(SCORE_KEY)}[{t.score_zero_window}])) == 0) "
            f"and on({BY}) (max by ({BY}) ({sc.TRAINING_STEP.name}) >= {t.score_zero_min_steps:g})",
            "5m",
            "warning",
            "critic/score/mean has been 0",
            f"The score has been exactly 0 for the last {t.score_zero_window} (or since the run started) past step "
            f"{t.score_zero_min_steps:g}: the model learns nothing (reward too strict, answer format never matched).",
        )
    ]


def _score(f: Frame, t: Thresholds) -> Verdict:
    score = f.metrics.get(SCORE_KEY)
    scores = f.series(SCORE_KEY) or ([score] if score is not None else [])
    past = (f.step or 0) >= t.score_zero_min_steps
    return (
        None if score is None else (past and max(scores) == 0.0),
        f"{SCORE_KEY} {_f(score)}" + (f" over {len(scores)} steps" if len(scores) > 1 else ""),
    )


def _grad_alerts(t: Thresholds) -> list[Rule]:
    return [
        Rule(
            "VerlGradNormSpike",
            spike(f"{sc.KEY_ACTOR_GRAD_NORM}|{sc.KEY_CRITIC_GRAD_NORM}", t.grad_norm_factor),
            "0m",
            "warning",
            "{{ $labels.key }} spiked",
            f"The gradient norm is above {t.grad_norm_factor:g}x its 1h median: gradient explosion (critic: value "
            "learning rate too high or an unstable return scale).",
        )
    ]


def _grad(f: Frame, t: Thresholds) -> Verdict:
    grad, med = f.metrics.get(GRAD_KEY), f.median(GRAD_KEY)
    enough = len(f.series(GRAD_KEY)) > MIN_HISTORY
    return (
        None if grad is None or med is None or not enough else grad > t.grad_norm_factor * med,
        f"{GRAD_KEY} {_f(grad)}" + (f", median {_f(med)}" if med is not None else ""),
    )


def _kl_alerts(t: Thresholds) -> list[Rule]:
    return [
        Rule(
            "VerlKLBlowUp",
            f"{training('|'.join(KL_KEYS))} > {t.kl_max:g}",
            "5m",
            "warning",
            "KL is blowing up ({{ $labels.key }})",
            f"{{{{ $labels.key }}}} above {t.kl_max:g} (healthy: 1e-3..1e-2; ppo_kl: drift per update, kl_loss: "
            "distance to the reference): the policy drifts; lower the temperature or raise the KL coefficient; "
            "check KL is not applied twice (loss and reward).",
        )
    ]


def _kl(f: Frame, t: Thresholds) -> Verdict:
    kls = {k: f.metrics[k] for k in KL_KEYS if k in f.metrics}
    return (
        None if not kls else max(kls.values()) > t.kl_max,
        (", ".join(f"{k} {_f(v)}" for k, v in kls.items()) or " / ".join(KL_KEYS) + " -") + f" (max {t.kl_max:g})",
    )


def _entropy_alerts(t: Thresholds) -> list[Rule]:
    return [
        Rule(
            "VerlEntropyCollapse",
            f"{training(ENTROPY_KEY)} < {t.entropy_min:g}",
            "10m",
            "warning",
            "actor/entropy collapsed",
            f"Entropy below {t.entropy_min:g}: the policy stopped exploring.",
        )
    ]


def _entropy(f: Frame, t: Thresholds) -> Verdict:
    ent = f.metrics.get(ENTROPY_KEY)
    return None if ent is None else ent < t.entropy_min, f"{ENTROPY_KEY} {_f(ent)} (min {t.entropy_min:g})"


def _memory_alerts(t: Thresholds) -> list[Rule]:
    used, free, reserved = sc.DCGM_FB_USED, sc.DCGM_FB_FREE, training(sc.KEY_MAX_MEMORY_RESERVED_RE)
    return [
        Rule(
            "VerlGPUMemoryNearLimit",
            f"({used} / ({used} + {free}) > {t.memory_fraction:g}) "
            # verl's GiB against the smallest GPU DCGM sees (MiB), or the configured size without DCGM
            f"or ({reserved} > on() group_left() ({t.memory_fraction:g} * min({used} + {free}) / 1024)) "
            f"or ({reserved} > {t.memory_fraction * t.gpu_memory_gb:g} unless on() {used})",
            "5m",
            "warning",
            "GPU memory near the limit",
            f"GPU memory above {t.memory_fraction:.0%} of the device (verl's perf/max_memory_reserved_gb against the "
            f"smallest GPU the DCGM exporter reports, or {t.gpu_memory_gb:g} GiB without it): OOM risk.",
        )
    ]


def _memory(f: Frame, t: Thresholds) -> Verdict:
    mem = {k: v for k, v in f.metrics.items() if MEMORY_KEY.fullmatch(k)}
    limit = t.memory_fraction * (f.gpu_memory_gb or t.gpu_memory_gb)
    worst = max(mem.items(), key=lambda kv: kv[1]) if mem else None
    return (
        None if worst is None else worst[1] > limit,
        f"{worst[0]} {worst[1]:.1f} GB (limit {limit:.0f})" if worst else "no perf/max_memory_* key",
    )


def _slower_alerts(t: Thresholds) -> list[Rule]:
    return [
        Rule(
            "VerlStepTimeRegression",
            f"avg_over_time({training(sc.KEY_STEP_TIME)}[15m]) > {t.step_regression_factor:g} * "
            f"quantile_over_time(0.5, {training(sc.KEY_STEP_TIME)}[6h])",
            "15m",
            "warning",
            "steps got slower",
            f"The 15-minute mean step time is above {t.step_regression_factor:g}x its 6h median: find the phase "
            "with `verl-otel slow-steps`.",
        )
    ]


def _slower(f: Frame, t: Thresholds) -> Verdict:
    step_s = f.metrics.get(sc.KEY_STEP_TIME)
    base = f.median(sc.KEY_STEP_TIME) if f.steps_seen > MIN_HISTORY else f.step_mean_s
    return (
        None if step_s is None or base is None else step_s > t.step_regression_factor * base,
        f"{sc.KEY_STEP_TIME} {_f(step_s)}" + (f" vs {_f(base)} typical" if base is not None else ""),
    )


def _hung_alerts(t: Thresholds) -> list[Rule]:
    phist, running = sc.PHASE_DURATION.name, f"({sc.PHASE_ELAPSED.name} and {sc.PHASE_ACTIVE.name} == 1)"
    return [
        Rule(
            "VerlPhaseHung",
            # elapsed, active and the histogram come from one process with one label set: match on all labels
            # (on(instance, phase) breaks when two runs share an instance, as they do behind the Collector)
            f"{running} > clamp_min({t.phase_hung_factor:g} * ({phist}_sum / {phist}_count), {t.phase_hung_min_s:g})",
            t.phase_hung_for,
            "critical",
            "phase {{ $labels.phase }} runs far longer than usual",
            f"The running phase's elapsed time is above {t.phase_hung_factor:g}x its mean duration "
            f"(at least {t.phase_hung_min_s:g}s): likely hung (a lost request, a collective waiting).",
        ),
        Rule(
            "VerlPhaseHungFirstRun",
            # VerlPhaseHung compares with the phase's own mean, which does not exist before it finished once
            f"{running} > {t.phase_first_max_s:g} unless ({phist}_count > 0)",
            "1m",
            "critical",
            "phase {{ $labels.phase }} has run for long without ever finishing",
            f"The phase has been running for more than {t.phase_first_max_s:g}s and has not finished once in this "
            f"process (first step or after a restart), so there is no typical duration to compare with.",
        ),
    ]


def _hung(f: Frame, t: Thresholds) -> Verdict:
    hung = [(p, e, f.phase_mean_s.get(p)) for p, e in f.active.items()]
    bad = [
        (p, e, mean)
        for p, e, mean in hung
        if (mean is not None and e > max(t.phase_hung_factor * mean, t.phase_hung_min_s))
        or (mean is None and e > t.phase_first_max_s)
    ]
    if not hung:
        return None, "no phase running"
    return bool(bad), "; ".join(
        f"{p} {e:.0f}s" + (f" vs mean {mean:.1f}s" if mean else "") for p, e, mean in bad or hung
    )


def _stuck_alerts(t: Thresholds) -> list[Rule]:
    by = f"{BY}, {sc.LABEL_ROLLOUT_WORKER}, {sc.LABEL_MODE}"
    return [
        Rule(
            "VerlRolloutStalled",
            # the rollout must be older than the window: changes() over a younger series says nothing
            f"(sum by ({by}) (changes({sc.ROLLOUT_SAMPLES_COMPLETED.name}[{t.rollout_stall_window}])) "
            f"== 0) and on({by}) (sum by ({by}) "
            f"({sc.ROLLOUT_SAMPLES_INFLIGHT.name}) > 0) and on({by}) (max by ({by}) "
            f"({sc.ROLLOUT_ELAPSED.name}) > {duration_seconds(t.rollout_stall_window):g})",
            "2m",
            "warning",
            "agent-loop worker {{ $labels.rollout_worker }}: no sample finished",
            f"No rollout sample finished in the last {t.rollout_stall_window} of a longer rollout while samples are "
            "in flight: a lost request or a stuck server (see verl_rollout_oldest_inflight_seconds).",
        )
    ]


def _stuck(f: Frame, t: Thresholds) -> Verdict:
    window = duration_seconds(t.rollout_stall_window)
    flying = [w for w in f.rollout_workers if w.inflight > 0]
    if not flying:
        return None, "no sample in flight"
    stuck = [w for w in flying if w.oldest_inflight_s > window]
    return bool(stuck), ", ".join(
        f"rollout worker {w.rollout_worker} oldest {w.oldest_inflight_s:.0f}s" for w in stuck
    ) or (f"oldest in flight {max(w.oldest_inflight_s for w in flying):.0f}s (max {window:g}s)")


def _clip_alerts(t: Thresholds) -> list[Rule]:
    return [
        Rule(
            "VerlClipFractionNearOne",
            f"avg_over_time({training(CLIPFRAC_KEY)}[15m]) > {t.clipfrac_max:g}",
            "15m",
            "warning",
            "PPO clips almost every token",
            f"The 15m mean of actor/pg_clipfrac is above {t.clipfrac_max:g} (healthy < 0.2): the updates push the "
            "ratio past the clip range; lower the learning rate or normalise the advantages.",
        )
    ]


def _clip(f: Frame, t: Thresholds) -> Verdict:
    clip = f.metrics.get(CLIPFRAC_KEY)
    return None if clip is None else clip > t.clipfrac_max, f"{CLIPFRAC_KEY} {_f(clip)} (max {t.clipfrac_max:g})"


SCORE_STUCK = HealthCheck("score stuck at 0", _score_alerts, _score)
GRAD_SPIKE = HealthCheck("grad-norm spike", _grad_alerts, _grad)
KL_BLOW_UP = HealthCheck("KL blow-up", _kl_alerts, _kl)
ENTROPY_COLLAPSE = HealthCheck("entropy collapse", _entropy_alerts, _entropy)
MEMORY_NEAR_LIMIT = HealthCheck("GPU memory near limit", _memory_alerts, _memory)
STEPS_SLOWER = HealthCheck("steps getting slower", _slower_alerts, _slower)
PHASE_HUNG = HealthCheck("phase hung", _hung_alerts, _hung)
ROLLOUT_STUCK = HealthCheck("rollout sample stuck", _stuck_alerts, _stuck)
CLIPPING = HealthCheck("PPO clipping most samples", _clip_alerts, _clip)
#: `top`'s health table, in this order
CHECKS = (
    SCORE_STUCK,
    GRAD_SPIKE,
    KL_BLOW_UP,
    ENTROPY_COLLAPSE,
    MEMORY_NEAR_LIMIT,
    STEPS_SLOWER,
    PHASE_HUNG,
    ROLLOUT_STUCK,
    CLIPPING,
)
