"""Spans of an agent-loop worker's batch: ``rollout.worker`` under the trainer's rollout/validate
span (its W3C traceparent travels in the batch), and ``rollout.sample`` spans for the slowest
samples only (VERL_OTEL_SAMPLE_SPANS per worker per batch, chosen when the batch is done), so the
long tail is always visible and the span volume does not grow with the batch size."""

from __future__ import annotations

import functools
import heapq
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from verl_otel import semconv as sc
from verl_otel.telemetry.agent import AgentSample, emit_children
from verl_otel.telemetry.propagation import extract
from verl_otel.telemetry.rollout import Batch, FinishedSample
from verl_otel.telemetry.services import Services
from verl_otel.telemetry.slowest_calls import Call, emit_group

#: turns a finished sample's opaque (trajectory, output) into span attributes (the hooks supply verl's reader)
Describe = Callable[[Any, Any], dict[str, Any]]


def _no_attributes(trajectory: Any, output: Any) -> dict[str, Any]:
    return {}


def tail_attributes(seconds: list[float], slowest: float | None = None) -> dict[str, float]:
    """The batch's median and slowest sample and their ratio (``seconds``: every sample's, or a uniform sample
    of them; ``slowest``: the slowest sample's, when ``seconds`` may lack it)."""
    if not seconds:
        return {}
    median, slowest = statistics.median(seconds), max(max(seconds), slowest or 0.0)
    attrs = {sc.ATTR_WORKER_SAMPLE_MEDIAN_S: median, sc.ATTR_WORKER_SAMPLE_MAX_S: slowest}
    if median > 0:
        attrs[sc.ATTR_WORKER_TAIL_RATIO] = slowest / median
    return attrs


def emit_batch(
    services: Services, worker: int | None, batch: Batch, max_sample_spans: int, describe: Describe = _no_attributes
) -> None:
    # the K slowest in O(N log K): the batch end's cost stays per sample what it is at 1k samples
    slowest = heapq.nlargest(max(0, max_sample_spans), batch.finished, key=lambda s: s.seconds)
    attrs: dict[str, Any] = {
        sc.ATTR_MODE: batch.mode,
        sc.ATTR_GLOBAL_STEP: batch.step,
        sc.ATTR_SAMPLES: max(batch.handed, len(batch.finished)),  # handed: all, when only the slowest were kept
        sc.ATTR_SAMPLES_SPANNED: len(slowest),
    }
    seconds = batch.durations or [s.seconds for s in batch.finished]
    tail = tail_attributes(seconds, slowest[0].seconds if slowest else None)
    attrs.update(tail)
    ratio = tail.get(sc.ATTR_WORKER_TAIL_RATIO)
    if ratio is not None and batch.mode == sc.MODE_TRAIN:
        services.store.set(sc.ROLLOUT_TAIL_RATIO, ("" if worker is None else str(worker),), ratio)
    if worker is not None:
        attrs[sc.ATTR_WORKER_INDEX] = worker
    # a sample whose engine requests named its span id up front gets that id (telemetry/engine_context.py)
    calls = [_call(services, s, describe) for s in slowest]
    errors = batch.failed if batch.handed else sum(1 for s in batch.finished if s.error is not None)
    emit_group(
        services,
        sc.SPAN_ROLLOUT_WORKER,
        extract(batch.parent),
        attrs,
        batch.start_ns,
        time.time_ns(),
        sc.SPAN_ROLLOUT_SAMPLE,
        calls,
        errors,
        "samples",
    )
    services.flush_soon()


def _call(services: Services, s: FinishedSample, describe: Describe) -> Call:
    """A kept sample's span: verl's attributes, and an agent loop's totals and turn spans (telemetry/agent.py)."""
    traj = s.trajectory if isinstance(s.trajectory, dict) else {}
    attrs = describe(s.trajectory, s.output)
    agent = traj.get(sc.SAMPLE_AGENT_KEY)
    children = None
    if isinstance(agent, AgentSample):
        attrs.update(agent.attributes(s.seconds))
        children = functools.partial(emit_children, services, sample=agent)
    return Call(s.start_ns, s.end_ns, attrs, s.error, traj.get(sc.SAMPLE_SPAN_ID_KEY), children)


class BatchSpans:
    """Emits a worker's finished batches. A batch dispatched outside any trainer step has no parent yet
    (the async trainers' warm-up prompts, submitted before step 1 opens): it waits for the next batch
    that has one, the step its samples feed, and joins that trace, whether or not it finished before
    that batch arrived (the outcome must not depend on how loaded the machine is). One that no parent
    reaches within ``orphan_wait_s`` is emitted as a root of its own."""

    def __init__(
        self,
        services: Services,
        max_sample_spans: int,
        orphan_wait_s: float = 120.0,
        describe: Describe = _no_attributes,
    ) -> None:
        self.services = services
        self.max_sample_spans, self.orphan_wait_s, self.describe = max_sample_spans, orphan_wait_s, describe
        self._lock = threading.Lock()
        self._orphans: list[tuple[float, int | None, Batch]] = []

    def done(self, worker: int | None, batch: Batch) -> None:
        if batch.parent is None:
            with self._lock:
                self._orphans.append((time.monotonic(), worker, batch))
            return
        self.adopt(batch.mode, batch.parent)
        emit_batch(self.services, worker, batch, self.max_sample_spans, self.describe)

    def adopt(self, mode: str, parent: str) -> None:
        """A batch of ``mode`` with a parent arrived: the waiting batches of that mode join its trace."""
        with self._lock:
            orphans = [o for o in self._orphans if o[2].mode == mode]
            self._orphans = [o for o in self._orphans if o[2].mode != mode]
        for _, worker, batch in orphans:
            batch.parent = parent
            emit_batch(self.services, worker, batch, self.max_sample_spans, self.describe)

    def expire(self) -> None:
        """On the flusher's tick: orphans that waited too long become roots."""
        now = time.monotonic()
        with self._lock:
            old = [o for o in self._orphans if now - o[0] >= self.orphan_wait_s]
            self._orphans = [o for o in self._orphans if now - o[0] < self.orphan_wait_s]
        for _, worker, batch in old:
            emit_batch(self.services, worker, batch, self.max_sample_spans, self.describe)
