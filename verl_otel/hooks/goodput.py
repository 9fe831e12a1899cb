"""The Ray side of the goodput split (telemetry/goodput.py): the trainer asks each agent-loop worker for its
rollout's occupancy when the rollout phase ends, and reads the answers, without waiting, when the step ends
(by then they are long in; an answer not in yet leaves the step's rollout unmeasured, all generating). The same
way, where GPUs exist, it asks the processes that ran each GPU phase for their GPUs' measured busy share
(:class:`RayGpuBusy`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel._log import logger
from verl_otel.hooks._safe import safe
from verl_otel.telemetry.goodput import occupancy_seconds
from verl_otel.telemetry.step_events import StepObserver

MAX_ASKED = 4  # steps whose answers are held at once


def worker_occupancy(actor: Any, step: int) -> tuple[float, int] | None:
    """In an agent-loop worker (through Ray's ``__ray_call__``): its training rollout's occupancy of ``step``."""
    return trackers.current().rollout.occupancy(sc.MODE_TRAIN, step)


def _forget_oldest(asked: dict[int, Any]) -> None:
    """Keep the questions of the MAX_ASKED latest steps (a step that never ended drops out)."""
    while len(asked) > MAX_ASKED:
        del asked[next(iter(asked))]


def _all_in(ray: Any, refs: list[Any]) -> list[Any] | None:
    """The answers' refs when every one is in, without waiting; None while any is out (the step stays unmeasured)."""
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
    return ready if len(ready) == len(refs) else None


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
        _forget_oldest(self._asked)

    def seconds(self, step: int) -> float | None:
        return safe(self._read, step)

    def _read(self, step: int) -> float | None:
        import ray

        refs = self._asked.pop(step, None)
        ready = _all_in(ray, refs) if refs else None
        if ready is None:
            return None
        return occupancy_seconds((r for r in ray.get(ready, timeout=1.0) if r), len(ready))


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


MAX_ASKED_PROCESSES = 64  # GPU processes asked per phase: an even spread over them beyond this
UNMEASURED_STEPS = 2  # steps in which no process had a reading, after which none is asked again (no GPU here)


def gpu_busy(actor: Any, seconds: float, ended: float) -> tuple[float, int] | None:
    """In a GPU process (through Ray's ``__ray_call__``): its GPUs' measured busy share over the ``seconds`` up to
    ``ended`` (the trainer's ``time.time()`` at the phase's end: a question that waited behind the worker's next
    call still reads the phase, given the hosts' clocks agree) and how many GPUs it read
    (export/gpu_sampler.py); None where its sampler is off (no GPU, no nvidia-ml-py)."""
    sampler = getattr(trackers.current().runtime, "gpus", None)
    return None if sampler is None else sampler.busy_last(seconds, time.time() - ended)


def spread(handles: list[Any], most: int) -> list[Any]:
    """At most ``most`` of ``handles``, evenly spread over them (each once)."""
    if len(handles) <= most:
        return handles
    return [handles[i * len(handles) // most] for i in range(most)]


class RayGpuBusy(StepObserver):
    """The step tracer's :class:`~verl_otel.telemetry.goodput.GpuBusy`: when a phase of ``sc.BUSY_BUCKETS`` ends,
    the processes that ran it (``processes(phase)``: Ray actor handles) are asked for their GPUs' busy share over
    the phase's seconds; at the step's end the answers in are joined without waiting, a phase whose answers are
    not all in is left unmeasured. Bounded: MAX_ASKED steps, MAX_ASKED_PROCESSES per phase."""

    def __init__(self, processes: Callable[[str], list[Any]]) -> None:
        self.processes = processes
        self.off = False  # no process measured its GPUs in UNMEASURED_STEPS steps: asking stopped
        self._unmeasured = 0
        self._asked: dict[int, list[tuple[str, float, list[Any]]]] = {}
        self._lock = threading.Lock()  # phases may end on another thread than the step (async trainers)

    def on_phase_end(self, phase: str, global_step: int, seconds: float, trace_id: str) -> None:
        if not self.off and global_step >= 0 and sc.PHASE_BUCKETS.get(phase) in sc.BUSY_BUCKETS:
            safe(self.ask, global_step, phase, seconds)

    def ask(self, step: int, phase: str, seconds: float) -> None:
        calls = [getattr(h, "__ray_call__", None) for h in spread(self.processes(phase), MAX_ASKED_PROCESSES)]
        ended = time.time()
        refs = [call.remote(gpu_busy, seconds, ended) for call in calls if call is not None]
        if not refs:
            return
        with self._lock:
            asked = self._asked.setdefault(step, [])
            if len(asked) < len(sc.PHASE_BUCKETS):
                asked.append((phase, seconds, refs))
            _forget_oldest(self._asked)

    def shares(self, step: int) -> dict[str, float] | None:
        return safe(self._read, step)

    def _read(self, step: int) -> dict[str, float] | None:
        import ray

        sums: dict[str, tuple[float, float]] = {}  # phase -> (busy x seconds, seconds)
        answered = 0
        with self._lock:
            asked = self._asked.pop(step, [])
        for phase, seconds, refs in asked:
            ready = _all_in(ray, refs)
            if ready is None:
                continue
            got = [a for a in (_answer(ray, r) for r in ready) if a]
            answered += len(ready)
            gpus = sum(n for _, n in got)
            if gpus > 0:
                share = sum(s * n for s, n in got) / gpus
                busy, secs = sums.get(phase, (0.0, 0.0))
                weight = max(seconds, 1e-6)
                sums[phase] = (busy + share * weight, secs + weight)
        if answered and not sums and not self.off:
            self._unmeasured += 1
            if self._unmeasured >= UNMEASURED_STEPS:  # said once: questions still out are dropped unread
                self.off = True
                with self._lock:
                    self._asked.clear()
                logger.info("no GPU process measures its GPUs (NVML off): the goodput buckets carry no busy share")
        return {p: b / s for p, (b, s) in sums.items()} or None


def _answer(ray: Any, ref: Any) -> tuple[float, int] | None:
    """A ready answer; None for a process that is gone (its error) or an answer of another shape."""
    try:
        share, gpus = ray.get(ref, timeout=0.1)
        return float(share), int(gpus)
    except Exception:  # noqa: BLE001 - a worker gone, or None: no reading of it
        return None


def watch_gpu_busy(m: Any, trainer: Any) -> None:
    """fit() started in the trainer's process: its step tracer asks the trainer's GPU processes for their busy
    share as each phase ends (hooks/verl_objects.py::gpu_processes, read then)."""
    from verl_otel.hooks.verl_objects import gpu_processes

    busy = m.steps.gpu_busy
    if not isinstance(busy, RayGpuBusy):
        busy = RayGpuBusy(lambda phase: [])
        m.steps.gpu_busy = busy
        m.steps.observers.append(busy)
    busy.processes = lambda phase: gpu_processes(trainer, phase)
