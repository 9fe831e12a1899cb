"""A rollout replica's side of a weight sync (issue 28 item 4): the trackers (telemetry/weight_sync_parts.py's
WeightReceive) timing a checkpoint engine's async receive stream as a server adapter loads it, and the hook on
verl's ``CheckpointEngineWorker.update_weights`` (hooks/weight_sync.py) putting ``weights.receive`` under the
trainer's derivable ``update_weights`` phase span only for the step the trainer told the worker about. The
separate_async demo run checks the real thing across Ray (tests/test_e2e_async.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import torch
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from verl_otel import runtime
from verl_otel import semconv as sc
from verl_otel.hooks import weight_sync as hook
from verl_otel.telemetry.propagation import inject, phase_span_id
from verl_otel.telemetry.weight_sync_parts import WeightReceive

KB = 1024


@pytest.fixture
def sdk() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


async def _received(sizes: list[int], wait_s: float) -> AsyncIterator[tuple[str, torch.Tensor]]:
    for i, n in enumerate(sizes):
        await asyncio.sleep(wait_s)  # the sender's bytes on their way
        yield f"w{i}", torch.zeros(n, dtype=torch.uint8)


async def _load(weights: Any, load_s: float) -> int:
    """A server adapter: loads each tensor it is given."""
    n = 0
    async for _name, _tensor in weights:
        await asyncio.sleep(load_s)
        n += 1
    return n


def _by_name(exporter: InMemorySpanExporter) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for s in exporter.get_finished_spans():
        out.setdefault(s.name, []).append(s)
    return out


def test_receive_and_load_are_told_apart(sdk):
    provider, exporter = sdk
    tracer = provider.get_tracer("test")
    phase = tracer.start_span(sc.PHASE_UPDATE_WEIGHTS)
    recv = WeightReceive(tracer, trace.set_span_in_context(phase), "nccl", 10 * KB, 2)
    loaded = asyncio.run(_load(recv.stream(_received([4 * KB] * 6, 0.02)), 0.1))
    recv.end()
    phase.end()
    got = _by_name(exporter)
    (s,) = got[sc.SPAN_WEIGHT_RECEIVE]
    a = s.attributes
    assert loaded == 6 and s.parent.span_id == phase.get_span_context().span_id
    assert a[sc.ATTR_WSYNC_BYTES] == 24 * KB and a[sc.ATTR_WSYNC_TENSORS] == 6 and a[sc.ATTR_WSYNC_BUCKETS] == 3
    assert a[sc.ATTR_WSYNC_MODE] == "nccl" and a[sc.ATTR_GLOBAL_STEP] == 2
    assert 0.1 <= a[sc.ATTR_WSYNC_RECEIVE_S] < 0.5  # 6 waits of 20 ms (slack for a loaded machine)
    assert 0.58 <= a[sc.ATTR_WSYNC_LOAD_S] < 2.0  # 6 loads of 100 ms
    assert sc.ATTR_WSYNC_GATHER_S not in a and sc.ATTR_WSYNC_TRANSFER_S not in a
    for name in (sc.SPAN_WEIGHT_RECEIVE_PULL, sc.SPAN_WEIGHT_LOAD):
        (part,) = got[name]
        assert part.parent.span_id == s.context.span_id
    assert len(got[sc.SPAN_WEIGHT_BUCKET]) == 3
    assert sc.SPAN_WEIGHT_SYNC not in got and sc.SPAN_WEIGHT_GATHER not in got


class _Engine:
    """A checkpoint engine's receiving side: an async stream of (name, tensor)."""

    def __init__(self) -> None:
        self.calls = 0

    def receive_weights(self, global_steps: int | None = None) -> AsyncIterator[tuple[str, torch.Tensor]]:
        self.calls += 1
        return _received([2 * KB] * 3, 0.0)


class _Worker:
    """verl's CheckpointEngineWorker.update_weights, as written in verl 0.9.1's checkpoint_engine/base.py."""

    def __init__(self) -> None:
        self.checkpoint_engine = _Engine()
        self.rollout_config = {"checkpoint_engine": {"backend": "nccl", "update_weights_bucket_megabytes": 1}}
        self.loaded = 0

    async def update_weights(self, global_steps: int | None = None) -> None:
        weights = self.checkpoint_engine.receive_weights(global_steps=global_steps)
        self.loaded += await _load(weights, 0.0)


@pytest.fixture
def hooked(sdk, monkeypatch, tmp_path):
    provider, exporter = sdk
    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    runtime.reset_for_tests()  # forgets given providers: ours is given after it
    monkeypatch.setitem(runtime._given, "tracer_provider", provider)
    try:
        yield exporter
    finally:
        runtime.reset_for_tests()


def _sync(worker: _Worker, step: int) -> None:
    asyncio.run(hook.replica_update_weights(worker.update_weights, worker, (), {"global_steps": step}))


def test_a_replica_sync_goes_under_the_phase_of_the_step_it_was_told(hooked):
    exporter = hooked
    trace_id = 0xAB << 100
    sampled = trace.SpanContext(trace_id, 7, False, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
    traceparent = inject(trace.set_span_in_context(trace.NonRecordingSpan(sampled)))
    worker = _Worker()
    _sync(worker, 1)  # nothing told: stall watch only
    hook._remember(worker, traceparent, 3)
    _sync(worker, 4)  # told about step 3: not this sync's trace
    assert worker.loaded == 6 and exporter.get_finished_spans() == ()
    _sync(worker, 3)
    assert worker.loaded == 9 and worker.checkpoint_engine.calls == 3
    (s,) = _by_name(exporter)[sc.SPAN_WEIGHT_RECEIVE]
    assert s.context.trace_id == trace_id and s.parent.span_id == phase_span_id(trace_id, sc.PHASE_UPDATE_WEIGHTS)
    assert s.attributes[sc.ATTR_WSYNC_TENSORS] == 3 and s.attributes[sc.ATTR_WSYNC_BYTES] == 6 * KB
    assert s.attributes[sc.ATTR_WSYNC_MODE] == "nccl" and s.attributes[sc.ATTR_WSYNC_BUCKET_SIZE] == 1 << 20
    # outside a sync the engine's stream is verl's own
    untouched = worker.checkpoint_engine.receive_weights()
    assert untouched.ag_code.co_name == "_received"
    asyncio.run(untouched.aclose())
