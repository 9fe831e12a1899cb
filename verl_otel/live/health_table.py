"""`top`'s health table: the health checks of dashboards/health.py (each declared once, with the alert rule
Prometheus evaluates and the predicate run here) on a live frame, with the alert rules' thresholds, so ``top``
and Prometheus agree on what trips."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from verl_otel.dashboards.health import CHECKS, HealthCheck
from verl_otel.dashboards.thresholds import DEFAULTS, Thresholds
from verl_otel.live.run_view import History, RunView

Verdict = Literal["ok", "tripped", "no data"]


@dataclass(frozen=True)
class Signal:
    name: str
    verdict: Verdict
    detail: str

    @property
    def tripped(self) -> bool:
        return self.verdict == "tripped"


class _Frame:
    """A view and its history as the checks' :class:`~verl_otel.dashboards.health.Frame`."""

    def __init__(self, view: RunView, history: History, gpu_memory_gb: float | None) -> None:
        self.metrics, self.step, self.step_mean_s = view.metrics, view.step, view.step_mean_s
        self.active, self.phase_mean_s = view.active, view.phase_mean_s
        self.rollout_workers = view.rollout_workers
        self.gpu_memory_gb = gpu_memory_gb
        self.steps_seen = len(history.steps)
        self._history = history

    def series(self, key: str) -> list[float]:
        return self._history.series(key)

    def median(self, key: str) -> float | None:
        return self._history.median(key)


def signals(
    view: RunView,
    history: History,
    t: Thresholds = DEFAULTS,
    gpu_memory_gb: float | None = None,
    checks: tuple[HealthCheck, ...] = CHECKS,
) -> list[Signal]:
    frame = _Frame(view, history, gpu_memory_gb)
    out = []
    for check in checks:
        bad, detail = check.judge(frame, t)
        out.append(Signal(check.name, "no data" if bad is None else ("tripped" if bad else "ok"), detail))
    return out
