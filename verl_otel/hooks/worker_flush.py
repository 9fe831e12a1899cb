"""Fit end for the trainer's worker processes: Ray ends them without ``atexit``, so spans that wait in their
memory for a collector that is down would be lost with them. When a fit() ends (the legacy and v1 trainers';
fully_async's trainer and rollouter, each for the workers it holds), it asks every worker process it reaches
(verl's worker groups, the agent-loop workers, the rollout replicas' servers and workers;
hooks/verl_objects.py::worker_processes) to flush its spans, or write what it could not send to
``$VERL_OTEL_DIR/unsent/`` (``verl-otel push`` sends it later), within what is left of VERL_OTEL_SHUTDOWN_TIMEOUT.

How a worker is reached: Ray's own ``__ray_call__`` (every actor has it since Ray 2.9, and verl 0.9 needs Ray
>= 2.41; it runs a function on the actor; hooks/rollout.py::RayTotalBar reads the workers' counts the same way),
with :func:`flush_or_spill`, a module-level function Ray pickles by reference. No method is added to verl's
classes: it reaches the colocated ``WorkerDict``/``FusedWorker`` classes verl builds at run time, the
``@ray.remote`` classes Ray pickles by value (``AgentLoopWorkerTQ``) and any rollout server class alike. The
reward-loop workers keep their own method (``verl_otel_emit_spans``: it emits their span groups first, then
flushes on a thread, off the actor's event loop); they are asked through :class:`RewardEmit` at the same time.

The calls are submitted before the trainer's own fit-end flush and waited for after it, so the workers'
waits run alongside the trainer's: fit end stays within the budget whatever the endpoint does. A worker
waits a little less than what is left (:data:`SPILL_MARGIN_S`), so its spill is written before the trainer
stops waiting. A handle without ``__ray_call__`` (an older Ray) is skipped with one warning line; a worker
never raises or blocks past its wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from verl_otel import trackers
from verl_otel._log import warn_once
from verl_otel.hooks._safe import safe

if TYPE_CHECKING:
    from verl_otel.telemetry.reward_emit import RewardEmit

SPILL_MARGIN_S = 1.0  # at most this (and a quarter of what is left) is kept for the workers' spill


class Budget(Protocol):
    def left_s(self) -> float: ...

    def spend(self, wait: Any) -> bool: ...


def flush_or_spill(actor: Any, wait_s: float) -> int:
    """Runs in a worker process (``actor`` is the Ray actor, unused): its exports flushed within ``wait_s``,
    else what is left written to unsent/. Returns the spans that wait there. Never raises."""
    try:
        rt = trackers.current().runtime
        return 0 if rt.flush_wait(max(0.0, min(float(wait_s), 3600.0))) else rt.spill_unsent()
    except Exception as exc:  # noqa: BLE001 - the worker goes on as if asked nothing
        warn_once("worker-spill", f"cannot flush this worker's spans at fit end ({exc!r})")
        return 0


class WorkerFlush:
    """One fit() call's fit end (made by :func:`for_owner` in the fit wrappers, given what it needs)."""

    def __init__(self, handles: Any, budget: Budget, reward: RewardEmit) -> None:
        self._handles = handles  # () -> the worker actor handles, read at fit end (v1 sets its manager in fit())
        self._budget = budget
        self._reward = reward
        self._refs: list[Any] = []

    def start(self) -> None:
        """Submit every worker's flush-or-spill; never waits."""
        left = self._budget.left_s()
        wait_s = max(0.0, left - min(SPILL_MARGIN_S, left / 4))
        refs = list(self._reward.fit_end_start(wait_s))
        missing = 0
        for handle in self._handles():
            call = getattr(handle, "__ray_call__", None)
            if call is None:
                missing += 1
                continue
            try:
                refs.append(call.remote(flush_or_spill, wait_s))
            except Exception:  # noqa: BLE001 - an actor that is gone: nothing of it to save
                missing += 1
        if missing:
            warn_once(
                "worker-flush",
                f"{missing} worker processes cannot be asked to flush at fit end (no __ray_call__ or gone): "
                "what their spans still wait for is lost if the collector is down",
            )
        self._refs = refs

    def wait(self) -> None:
        """Wait for the workers' answers within what is left of the budget (they stop waiting before it ends)."""
        refs, self._refs = self._refs, []
        if refs:
            import ray

            self._budget.spend(lambda t: len(ray.wait(refs, num_returns=len(refs), timeout=t)[0]) == len(refs))


def for_owner(owner: Any) -> WorkerFlush:
    """The fit end of ``owner`` (a trainer, or fully_async's rollouter): the worker processes it holds
    (hooks/verl_objects.py::worker_processes, read at fit end) and the reward-loop workers attached to the trackers."""
    from verl_otel.hooks.verl_objects import worker_processes

    m = trackers.current()
    return WorkerFlush(lambda: worker_processes(owner), m.runtime.budget, m.reward_emit)


def fit_end(workers: WorkerFlush | None, *own: Callable[[], object]) -> None:
    """A fit() ended: its workers are asked first, the process' ``own`` flushes run meanwhile, then the workers'
    answers are waited for, all within the budget. In a coroutine fit() (fully_async's trainer and rollouter) the
    wait holds the actor's event loop, as its own fit-end flush does: training is over. Never raises."""
    if workers is not None:
        safe(workers.start)
    for flush in own:
        safe(flush)
    if workers is not None:
        safe(workers.wait)
