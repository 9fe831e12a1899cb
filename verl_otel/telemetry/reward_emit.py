"""Trainer side of the reward spans' step-end emit: the reward-loop workers (Ray actors of their own)
cannot see a step end, so at each step's end the trainer asks each of them to emit that step's reward
spans, and at fit end waits for that within the process' shutdown budget.

A step end only *submits* the calls (no waiting, no export on the training thread); fit end is the one
place that waits, as the trainer's own exports do. How the workers are asked is the hooks' (Ray's remote
calls, hooks/reward_emit.py): :class:`RewardWorkers`.
"""

from __future__ import annotations

from typing import Any, Protocol

from verl_otel.telemetry.services import Services
from verl_otel.telemetry.step_events import StepObserver, StepResult


class RewardWorkers(Protocol):
    def ask(self, trace_id: str | None, wait_s: float) -> list[Any]:
        """Ask every worker to emit the groups of ``trace_id`` (None: all, exported within ``wait_s``);
        the pending answers, [] when the workers cannot be asked."""
        ...

    def wait(self, answers: list[Any], timeout_s: float) -> bool:
        """True when every answer came within ``timeout_s``."""
        ...


class RewardEmit(StepObserver):
    """A step observer of the fit() process."""

    def __init__(self, services: Services) -> None:
        self._svc = services
        self._workers: RewardWorkers | None = None

    def attach(self, workers: RewardWorkers | None) -> None:
        """The reward-loop workers of the trainer whose fit() starts."""
        self._workers = workers

    def on_step_end(self, result: StepResult) -> None:
        if self._workers is not None:
            self._workers.ask(result.trace_id, 0.0)  # submitted, not awaited: the reward workers emit on their own

    def fit_end_start(self, wait_s: float) -> list[Any]:
        """Every group left emitted and flushed, or written to unsent/, within ``wait_s``: submitted; the
        caller waits for the answers (hooks/worker_flush.py, beside the other workers')."""
        workers, self._workers = self._workers, None
        return [] if workers is None else workers.ask(None, wait_s)

    def fit_end(self) -> None:
        """Every group left, exported, within what is left of VERL_OTEL_SHUTDOWN_TIMEOUT (when fit end did not
        ask them with the other workers)."""
        workers = self._workers
        answers = self.fit_end_start(self._svc.budget_left_s())
        if answers and workers is not None:
            self._svc.spend(lambda t: workers.wait(answers, t))
