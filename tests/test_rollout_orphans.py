"""A rollout batch dispatched outside any trainer step (async trainers' warm-up prompts, submitted before
step 1) joins the trace of the step whose dispatch comes next, whether it finished before that dispatch
(a loaded machine) or after it (an idle one): the trace shape does not depend on timing."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from verl_otel import runtime, trackers
from verl_otel.telemetry.rollout import RolloutTracker
from verl_otel.telemetry.rollout_spans import BatchSpans

STEP1 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def spans():
    mem = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(mem))
    runtime.reset_for_tests()
    runtime.configure(tracer_provider=provider)
    yield mem
    runtime.reset_for_tests()


def _run(tracker: RolloutTracker, n: int) -> None:
    for _ in range(n):
        tracker.sample_finished("train", tracker.sample_started("train"), {"step": 1}, None)


@pytest.mark.parametrize("warmup_done_first", [True, False])
def test_warmup_batch_joins_the_next_steps_trace(spans, warmup_done_first):
    tracker = RolloutTracker()
    emitter = BatchSpans(trackers.current().services, max_sample_spans=2)
    tracker.on_batch_done.append(emitter.done)
    tracker.on_dispatch.append(emitter.adopt)
    tracker.batch_started("train", 1, 2, None)  # warm-up: no step open on the trainer
    if warmup_done_first:
        _run(tracker, 2)  # finished before step 1 dispatched anything
        assert not [s for s in spans.get_finished_spans() if s.name == "rollout.worker"], "it waits for a parent"
    tracker.batch_started("train", 1, 2, STEP1)
    _run(tracker, 4 if not warmup_done_first else 2)
    workers = [s for s in spans.get_finished_spans() if s.name == "rollout.worker"]
    assert workers and all(format(w.parent.trace_id, "032x") == STEP1.split("-")[1] for w in workers), workers


def test_an_orphan_nobody_adopts_becomes_a_root(spans):
    tracker = RolloutTracker()
    emitter = BatchSpans(trackers.current().services, max_sample_spans=1, orphan_wait_s=0.0)
    tracker.on_batch_done.append(emitter.done)
    tracker.batch_started("train", 1, 1, None)
    _run(tracker, 1)
    emitter.expire()
    workers = [s for s in spans.get_finished_spans() if s.name == "rollout.worker"]
    assert len(workers) == 1 and workers[0].parent is None
