"""Rollout progress of one agent-loop worker process, per mode (train / validate).

The per-sample path (:meth:`RolloutTracker.sample_started` / :meth:`sample_finished`) only touches
ints, a dict and a list; gauges are computed when read. When a worker's batch is done, the finished
samples are handed to the span emitter, which keeps the slowest ones (docs/guides/step-traces.md).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from verl_otel import semconv as sc
from verl_otel.process.metrics import Reading
from verl_otel.telemetry.eta import rate_eta

DURATIONS_KEPT = 4096  # samples' seconds a batch keeps for its median (a uniform sample past that)


@dataclass
class FinishedSample:
    start_ns: int
    end_ns: int
    seconds: float
    trajectory: Any  # verl's per-sample trajectory and output: opaque here, described (by the hooks'
    output: Any  # reader) only for the samples that get a span
    error: BaseException | None = None


# (monotonic start, monotonic end, trajectory, output, error): a plain tuple on the hot path,
# turned into a FinishedSample only when the batch is handed over
_Raw = tuple[float, float, dict[str, Any], Any, "BaseException | None"]


@dataclass
class Batch:
    """One rollout of this worker: from the first dispatch until completed == expected."""

    mode: str
    step: int
    expected: int = 0
    completed: int = 0
    start: float = field(default_factory=time.monotonic)
    start_ns: int = field(default_factory=time.time_ns)
    active: dict[int, float] = field(default_factory=dict)  # token -> monotonic start
    # until handed over: _Raw tuples, or with the tracker's ``keep`` a min-heap of the slowest (seconds, seq, _Raw)
    finished: list[Any] = field(default_factory=list)
    parent: str | None = None  # W3C traceparent of the trainer's span
    end: float | None = None  # monotonic time the last expected sample finished
    version: int | None = None  # fully_async: the rollouter's parameter version (it has no step)
    handed: int = 0  # samples finished since the last hand-over (``finished`` may hold only the slowest of them)
    # those samples' seconds, for the batch's median: every one, or a uniform sample of DURATIONS_KEPT past that
    durations: list[float] = field(default_factory=list)
    failed: int = 0  # of those, the ones that raised
    next_kept: int = 0  # past DURATIONS_KEPT: the index (in ``handed``) of the next sample whose seconds are kept
    weight: float = 1.0  # ... and Algorithm L's running weight that draws it
    # occupancy, for the goodput split (telemetry/goodput.py): samples x seconds in flight, the most in flight at
    # once, and the monotonic time ``area`` was last brought up to
    area: float = 0.0
    peak: int = 0
    last: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> bool:
        return self.expected > 0 and self.completed >= self.expected


def _draw_next_kept(batch: Batch) -> None:
    """Reservoir sampling by skips (Li's Algorithm L): each sample's seconds are kept with the same chance, as with
    one random draw per sample (Algorithm R), but the draws are per kept sample, so a sample past DURATIONS_KEPT
    costs a comparison, whatever the batch size."""
    batch.weight *= math.exp(math.log(1.0 - random.random()) / DURATIONS_KEPT)
    skip = math.log(1.0 - random.random()) / math.log1p(-batch.weight) if 0.0 < batch.weight < 1.0 else 0.0
    batch.next_kept = batch.handed + 1 + int(min(skip, 2.0**62))


class RolloutTracker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.worker: int | None = None
        self._batches: dict[str, Batch] = {}
        self._tokens = itertools.count(1)
        self.on_batch_done: list[Callable[[int | None, Batch], None]] = []
        self.on_progress: list[Callable[[int | None, Batch], None]] = []
        self.on_dispatch: list[Callable[[str, str], None]] = []  # a chunk arrived with the trainer's context
        #: finished samples held per batch until it is handed over: the ``keep`` slowest (the span emitter's K, so
        #: a worker's memory does not grow with the batch), or all of them (None)
        self.keep: int | None = None
        self._seq = itertools.count()
        self._occupied: dict[tuple[str, int], tuple[float, int]] = {}  # replaced batches' (area, peak), bounded

    # -- dispatch -------------------------------------------------------------------------------
    def batch_started(
        self, mode: str, step: int, n_samples: int, parent: str | None, version: int | None = None
    ) -> None:
        """A chunk of ``n_samples`` reached this worker. A finished rollout of that mode starts
        anew; an unfinished one (async trainers overlap) grows."""
        with self._lock:
            cur = self._batches.get(mode)
            if cur is None or cur.done or cur.expected == 0 or (cur.step != step and not cur.active):
                if cur is not None:
                    self._keep_occupancy(cur)
                cur = self._batches[mode] = Batch(mode=mode, step=step, parent=parent)
            cur.expected += n_samples
            cur.step, cur.version = step, version
            if parent:
                cur.parent = parent
        if parent:
            for cb in self.on_dispatch:
                cb(mode, parent)

    # -- per sample (hot path) --------------------------------------------------------------------
    def sample_started(self, mode: str) -> int:
        token = next(self._tokens)
        with self._lock:
            batch = self._batches.get(mode)
            if batch is None:  # a sample outside any known dispatch (e.g. an unhooked caller)
                batch = self._batches[mode] = Batch(mode=mode, step=-1)
            now = time.monotonic()
            active = batch.active
            n = len(active)
            batch.area += n * (now - batch.last)
            batch.last = now
            active[token] = now
            if n >= batch.peak:
                batch.peak = n + 1
        return token

    def sample_finished(
        self, mode: str, token: int, trajectory: Any, output: Any, error: BaseException | None = None
    ) -> float | None:
        """The sample's seconds (None outside any batch)."""
        now = time.monotonic()
        with self._lock:
            batch = self._batches.get(mode)
            if batch is None:
                return None
            batch.area += len(batch.active) * (now - batch.last)
            batch.last = now
            raw = (batch.active.pop(token, now), now, trajectory, output, error)
            seconds = now - raw[0]
            if batch.handed < DURATIONS_KEPT:
                batch.durations.append(seconds)
                if batch.handed == DURATIONS_KEPT - 1:
                    batch.weight = 1.0
                    _draw_next_kept(batch)
            elif batch.handed == batch.next_kept:
                batch.durations[random.randrange(DURATIONS_KEPT)] = seconds
                _draw_next_kept(batch)
            keep = self.keep
            if keep is None:
                batch.finished.append(raw)
            elif len(batch.finished) < keep:
                heapq.heappush(batch.finished, (seconds, next(self._seq), raw))
            elif keep and seconds > batch.finished[0][0]:
                heapq.heapreplace(batch.finished, (seconds, next(self._seq), raw))
            batch.handed += 1
            batch.failed += error is not None
            batch.completed += 1
            done = batch.expected > 0 and batch.completed >= batch.expected
            if done:
                batch.end = now
        if self.on_progress:
            for cb in self.on_progress:
                cb(self.worker, batch)
        if done:
            self.finish(mode)
        return seconds

    def finish(self, mode: str) -> None:
        """Hand the finished samples of ``mode`` to the span emitter (once)."""
        with self._lock:
            batch = self._batches.get(mode)
            if batch is None or not batch.handed:
                return
            raw, batch.finished = batch.finished, []
            raw = [entry[2] if len(entry) == 3 else entry for entry in raw]  # heap entries (with ``keep``) or _Raw
            handed, failed, batch.handed, batch.failed = batch.handed, batch.failed, 0, 0
            durations, batch.durations = batch.durations, []
            # wall-clock = monotonic + offset, computed once per batch, not per sample
            offset_ns = time.time_ns() - time.monotonic_ns()
            finished = [
                FinishedSample(int(s * 1e9) + offset_ns, int(e * 1e9) + offset_ns, e - s, traj, out, err)
                for s, e, traj, out, err in raw
            ]
            snapshot = Batch(
                batch.mode,
                batch.step,
                batch.expected,
                batch.completed,
                batch.start,
                batch.start_ns,
                {},
                finished,
                batch.parent,
                handed=handed,
                failed=failed,
                durations=durations,
            )
        for cb in self.on_batch_done:
            cb(self.worker, snapshot)

    # -- gauges -------------------------------------------------------------------------------------
    def readings(self) -> Iterable[Reading]:
        now = time.monotonic()
        worker = "" if self.worker is None else str(self.worker)
        with self._lock:
            # the oldest sample in flight is the first: ``active`` holds them in the order they started (each start
            # read and inserted under the lock), so a reading does not walk every sample in flight under the lock
            rows = [
                (b.mode, b.expected, b.completed, len(b.active), next(iter(b.active.values()), None), b.start, b.end)
                for b in self._batches.values()
            ]
        for mode, expected, completed, inflight, oldest, start, end in rows:
            labels = (worker, mode)
            elapsed = (end if end is not None else now) - start
            yield sc.ROLLOUT_SAMPLES_EXPECTED, labels, float(expected)
            yield sc.ROLLOUT_SAMPLES_COMPLETED, labels, float(completed)
            yield sc.ROLLOUT_SAMPLES_INFLIGHT, labels, float(inflight)
            yield sc.ROLLOUT_OLDEST_INFLIGHT, labels, 0.0 if oldest is None else now - oldest
            yield sc.ROLLOUT_ELAPSED, labels, elapsed
            eta = rate_eta(elapsed, completed, expected)
            if eta is not None:  # unknown until the first sample finishes
                yield sc.ROLLOUT_ETA, labels, eta

    def _keep_occupancy(self, batch: Batch) -> None:
        if batch.peak:
            self._occupied[(batch.mode, batch.step)] = (batch.area, batch.peak)
            while len(self._occupied) > 16:
                del self._occupied[next(iter(self._occupied))]

    def occupancy(self, mode: str, step: int) -> tuple[float, int] | None:
        """(samples x seconds in flight, peak in flight) of this worker's rollout of ``step`` (None: none seen)."""
        with self._lock:
            batch = self._batches.get(mode)
            if batch is not None and batch.step == step and batch.peak:
                area = batch.area + len(batch.active) * (time.monotonic() - batch.last)
                return area, batch.peak
            return self._occupied.get((mode, step))

    def snapshot(self, mode: str) -> Batch | None:
        with self._lock:
            return self._batches.get(mode)
