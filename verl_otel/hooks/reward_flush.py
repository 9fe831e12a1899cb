"""Trainer side of the reward spans' step-end flush: the reward-loop workers (Ray actors of their own)
cannot see a step end, so at each step's end the trainer asks each of them to emit that step's reward
spans (``verl_otel_flush``, the method hooks/targets.py adds to verl's ``RewardLoopWorker``), and at fit
end waits for that within the process' shutdown budget.

A step end only *submits* the Ray calls (no waiting, no export on the training thread); fit end is the
one place that waits, as the trainer's own exports do.
"""

from __future__ import annotations

from typing import Any

from verl_otel import runtime
from verl_otel._log import warn_once
from verl_otel.telemetry.steps import StepObserver, StepResult

METHOD = "verl_otel_flush"


class RewardFlush(StepObserver):
    """A step observer (telemetry/steps.py) of the fit() process."""

    def __init__(self) -> None:
        self._workers: list[Any] = []
        self._off = False

    def attach(self, workers: list[Any]) -> None:
        """The reward-loop worker handles of the trainer whose fit() starts (hooks/verl_objects.py)."""
        self._workers = workers

    def _ask(self, trace_id: str | None, wait_s: float) -> list[Any]:
        if self._off:
            return []
        refs = []
        for worker in self._workers:
            method = getattr(worker, METHOD, None)
            if method is None:  # made remote without our method (telemetry off where verl made it)
                self._off = True
                warn_once(
                    "reward-flush",
                    "the reward-loop workers have no step-end flush: reward spans are "
                    "emitted after 2 s idle only (a run's last step may lack them)",
                )
                return []
            refs.append(method.remote(trace_id, wait_s))
        return refs

    # -- StepObserver -------------------------------------------------------------------------------
    def on_step_end(self, result: StepResult) -> None:
        self._ask(result.trace_id, 0.0)  # submitted, not awaited: the reward workers emit on their own

    # -- fit end ------------------------------------------------------------------------------------
    def fit_end(self) -> None:
        """Every group left, exported, within what is left of VERL_OTEL_SHUTDOWN_TIMEOUT."""
        rt = runtime.current()
        refs = self._ask(None, rt.budget.left_s())
        self._workers = []
        if refs:
            import ray

            rt.budget.spend(lambda t: len(ray.wait(refs, num_returns=len(refs), timeout=t)[0]) == len(refs))


REWARD_FLUSH = RewardFlush()
