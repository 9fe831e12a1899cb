"""The health signals of verl's log-reading guides (as in dashboards/alerts.py) on a live frame: score stuck at 0,
gradient-norm spike, KL blow-up, entropy collapse, memory near the limit, steps getting slower, a
phase running far past its mean, a rollout sample stuck, PPO clipping almost everything. Thresholds
are the alert rules' (:class:`~verl_otel.dashboards.alerts.Thresholds`), so ``top`` and Prometheus
agree on what trips."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from verl_otel import semconv as sc
from verl_otel.dashboards.thresholds import DEFAULTS, Thresholds, duration_seconds
from verl_otel.live.run_view import TIMING_PREFIX, History, RunView

State = Literal["ok", "tripped", "no data"]

CLIPFRAC_KEY = sc.KEY_PG_CLIPFRAC
KL_KEYS = (sc.KEY_PPO_KL, sc.KEY_KL_LOSS)
GRAD_KEY, SCORE_KEY, ENTROPY_KEY = sc.KEY_ACTOR_GRAD_NORM, sc.KEY_SCORE_MEAN, sc.KEY_ENTROPY
#: the guide's perf/max_memory_allocated_gb as well as the alert rule's reserved memory
MEMORY_KEY = re.compile(sc.KEY_MAX_MEMORY_RESERVED_RE.replace("reserved", "(reserved|allocated)"))
MIN_HISTORY = 3  # steps before a "times its median" comparison means anything


@dataclass(frozen=True)
class Signal:
    name: str
    state: State
    detail: str

    @property
    def tripped(self) -> bool:
        return self.state == "tripped"


def _sig(name: str, bad: bool | None, detail: str) -> Signal:
    return Signal(name, "no data" if bad is None else ("tripped" if bad else "ok"), detail)


def signals(
    view: RunView, history: History, t: Thresholds = DEFAULTS, gpu_memory_gb: float | None = None
) -> list[Signal]:
    m = view.metrics
    out = []
    score = m.get(SCORE_KEY)
    scores = history.series(SCORE_KEY) or ([score] if score is not None else [])
    past = (view.step or 0) >= t.score_zero_min_steps
    out.append(
        _sig(
            "score stuck at 0",
            None if score is None else (past and max(scores) == 0.0),
            f"{SCORE_KEY} {_f(score)}" + (f" over {len(scores)} steps" if len(scores) > 1 else ""),
        )
    )

    grad, med = m.get(GRAD_KEY), history.median(GRAD_KEY)
    enough = len(history.series(GRAD_KEY)) > MIN_HISTORY
    out.append(
        _sig(
            "grad-norm spike",
            None if grad is None or med is None or not enough else grad > t.grad_norm_factor * med,
            f"{GRAD_KEY} {_f(grad)}" + (f", median {_f(med)}" if med is not None else ""),
        )
    )

    kls = {k: m[k] for k in KL_KEYS if k in m}
    out.append(
        _sig(
            "KL blow-up",
            None if not kls else max(kls.values()) > t.kl_max,
            (", ".join(f"{k} {_f(v)}" for k, v in kls.items()) or " / ".join(KL_KEYS) + " -") + f" (max {t.kl_max:g})",
        )
    )

    ent = m.get(ENTROPY_KEY)
    out.append(
        _sig(
            "entropy collapse",
            None if ent is None else ent < t.entropy_min,
            f"{ENTROPY_KEY} {_f(ent)} (min {t.entropy_min:g})",
        )
    )

    mem = {k: v for k, v in m.items() if MEMORY_KEY.fullmatch(k)}
    limit = t.memory_fraction * (gpu_memory_gb or t.gpu_memory_gb)
    worst = max(mem.items(), key=lambda kv: kv[1]) if mem else None
    out.append(
        _sig(
            "GPU memory near limit",
            None if worst is None else worst[1] > limit,
            f"{worst[0]} {worst[1]:.1f} GB (limit {limit:.0f})" if worst else "no perf/max_memory_* key",
        )
    )

    step_s = m.get(TIMING_PREFIX + "step")
    base = history.median(TIMING_PREFIX + "step") if len(history.steps) > MIN_HISTORY else view.step_mean_s
    out.append(
        _sig(
            "steps getting slower",
            None if step_s is None or base is None else step_s > t.step_regression_factor * base,
            f"{TIMING_PREFIX}step {_f(step_s)}" + (f" vs {_f(base)} typical" if base is not None else ""),
        )
    )

    hung = [(p, e, view.phase_mean_s.get(p)) for p, e in view.active.items()]
    bad = [
        (p, e, mean)
        for p, e, mean in hung
        if (mean is not None and e > max(t.phase_hung_factor * mean, t.phase_hung_min_s))
        or (mean is None and e > t.phase_first_max_s)
    ]
    out.append(
        _sig(
            "phase hung",
            bool(bad) if hung else None,
            "; ".join(f"{p} {e:.0f}s" + (f" vs mean {mean:.1f}s" if mean else "") for p, e, mean in bad or hung)
            if hung
            else "no phase running",
        )
    )

    window = duration_seconds(t.rollout_stall_window)
    flying = [w for w in view.workers if w.inflight > 0]
    stuck = [w for w in flying if w.oldest_inflight_s > window]
    out.append(
        _sig(
            "rollout sample stuck",
            bool(stuck) if flying else None,
            ", ".join(f"worker {w.worker} oldest {w.oldest_inflight_s:.0f}s" for w in stuck)
            or (
                f"oldest in flight {max(w.oldest_inflight_s for w in flying):.0f}s (max {window:g}s)"
                if flying
                else "no sample in flight"
            ),
        )
    )

    clip = m.get(CLIPFRAC_KEY)
    out.append(
        _sig(
            "PPO clipping most samples",
            None if clip is None else clip > t.clipfrac_max,
            f"{CLIPFRAC_KEY} {_f(clip)} (max {t.clipfrac_max:g})",
        )
    )
    return out


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"
