"""The Ray side of the goodput split (telemetry/goodput.py): the trainer asks each agent-loop worker for its
rollout's occupancy when the rollout phase ends, and reads the answers, without waiting, when the step ends
(by then they are long in; an answer not in yet leaves the step's rollout unmeasured, all generating)."""

from __future__ import annotations

from typing import Any

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel.hooks._safe import safe
from verl_otel.telemetry.goodput import occupancy_seconds
from verl_otel.telemetry.step_events import StepObserver

MAX_ASKED = 4  # steps whose answers are held at once (a step that never ended drops out)


def worker_occupancy(actor: Any, step: int) -> tuple[float, int] | None:
    """In an agent-loop worker (through Ray's ``__ray_call__``): its training rollout's occupancy of ``step``."""
    return trackers.current().rollout.occupancy(sc.MODE_TRAIN, step)


class RayOccupancy(StepObserver):
    """The step tracer's :class:`~verl_otel.telemetry.goodput.Occupancy` of the agent-loop workers."""

    def __init__(self) -> None:
        self.workers: list[Any] = []
        self._asked: dict[int, list[Any]] = {}

    def on_phase_end(self, phase: str, global_step: int, seconds: float, trace_id: str) -> None:
        if phase == sc.PHASE_ROLLOUT and global_step >= 0:
            safe(self.ask, global_step)

    def ask(self, step: int) -> None:
        workers = list(self.workers)
        if not workers:
            return
        self._asked[step] = [w.__ray_call__.remote(worker_occupancy, step) for w in workers]
        while len(self._asked) > MAX_ASKED:
            del self._asked[next(iter(self._asked))]

    def seconds(self, step: int) -> float | None:
        return safe(self._read, step)

    def _read(self, step: int) -> float | None:
        import ray

        refs = self._asked.pop(step, None)
        if not refs:
            return None
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if len(ready) < len(refs):
            return None
        return occupancy_seconds((r for r in ray.get(ready, timeout=1.0) if r), len(refs))


def watch_occupancy(m: Any, manager: Any) -> None:
    """A training dispatch in the fit() process: the step tracer asks these workers for the rollout's occupancy."""
    workers = list(getattr(manager, "agent_loop_workers", None) or ())
    if not workers:
        return
    occupancy = m.steps.occupancy
    if not isinstance(occupancy, RayOccupancy):
        occupancy = RayOccupancy()
        m.steps.occupancy = occupancy
        m.steps.observers.append(occupancy)
    occupancy.workers = workers
