"""What the step tracer tells its observers (telemetry/steps.py): the run, each phase, each step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from verl_otel.telemetry.step_tokens import StepTokens


@dataclass(frozen=True)
class RunInfo:
    trainer: str
    project: str
    experiment: str
    steps_planned: int | None
    rollout_n: int | None
    batch_size: int | None
    mode: str | None = None
    verl_version: str | None = None
    pools: tuple[Any, ...] = ()  # telemetry/goodput.py's Pool of each resource pool this process accounts


@dataclass
class StepResult:
    global_step: int
    seconds: float
    phases: dict[str, float]
    trace_id: str
    error: bool
    tokens: StepTokens | None = None  # the training batch's, when the hooks counted them
    goodput: Any = None  # telemetry/goodput.py's Split of the step's GPU time


class StepObserver:
    """Receives the step tracer's events; every method is a no-op here, so an observer overrides only
    what it uses. Implementations must be cheap (they run on the training thread) and must not raise."""

    def on_fit_start(self, run: RunInfo) -> None:
        """fit() started a run."""

    def on_phase_start(self, phase: str, global_step: int) -> None:
        """A phase (semconv PHASE_*) of ``global_step`` started."""

    def on_phase_end(self, phase: str, global_step: int, seconds: float, trace_id: str) -> None:
        """The phase ended after ``seconds``; ``trace_id`` is its step's trace."""

    def on_step_end(self, result: StepResult) -> None:
        """The step ended (its metrics were logged)."""

    def on_metrics(self, data: Mapping[str, Any], global_step: int) -> None:
        """verl logged the step's metrics dict."""
