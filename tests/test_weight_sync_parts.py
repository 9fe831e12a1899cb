"""A weight sync's parts (issue 28 item 4): the tracker (telemetry/weight_sync_parts.py) timing a real per-tensor export
stream as a checkpoint engine consumes it under verl's bucketing rule, on the real OTel SDK; the derivable phase
span id a worker parents its sync under; and ``slow-steps`` naming the part, from spans and from a streamed file."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import torch
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from helpers.step_spans import S, otlp_json, write_lines

from verl_otel import semconv as sc
from verl_otel.analysis.otlp_json import parse_request
from verl_otel.analysis.slow_steps import rank, to_json, to_text
from verl_otel.analysis.step_stream import read_steps
from verl_otel.analysis.step_traces import build_steps
from verl_otel.telemetry.propagation import inject, phase_context, phase_span_id
from verl_otel.telemetry.weight_sync_parts import WeightSync

KB = 1024


@pytest.fixture
def sdk():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


def _export(sizes: list[int], pull_s: float = 0.0) -> Iterator[tuple[str, torch.Tensor]]:
    for i, n in enumerate(sizes):
        time.sleep(pull_s)  # the gather (an FSDP all-gather)
        yield f"w{i}", torch.zeros(n, dtype=torch.uint8)


def _consume(weights, bucket: int, send_s: dict[int, float]) -> int:
    """verl's engines' rule: fill a bucket, send it when the next tensor does not fit, the last after the end."""
    filled = index = 0
    for _name, t in weights:
        if filled and filled + t.nbytes > bucket:
            time.sleep(send_s.get(index, 0.0))
            index, filled = index + 1, 0
        filled += t.nbytes
    time.sleep(send_s.get(index, 0.0))
    return index + 1


def _sync(tracer, exporter, bucket_spans: int = sc.WSYNC_BUCKET_SPANS):
    root = tracer.start_span("update_weights")
    sync = WeightSync(tracer, trace.set_span_in_context(root), "nccl", 10 * KB, 3, bucket_spans=bucket_spans)
    return root, sync


def _spans(exporter) -> dict[str, list]:
    out: dict[str, list] = {}
    for s in exporter.get_finished_spans():
        out.setdefault(s.name, []).append(s)
    return out


def test_parts_buckets_and_bytes(sdk):
    tracer, exporter = sdk
    root, sync = _sync(tracer, exporter)
    sizes = [4 * KB] * 10  # two tensors fill a 10 KB bucket: 5 buckets
    sent = _consume(sync.stream(_export(sizes, pull_s=0.01)), 10 * KB, {2: 0.3})
    sync.end()
    root.end()
    got = _spans(exporter)
    (s,) = got[sc.SPAN_WEIGHT_SYNC]
    a = s.attributes
    assert s.parent.span_id == root.get_span_context().span_id
    assert a[sc.ATTR_WSYNC_BUCKETS] == sent == 5 and a[sc.ATTR_WSYNC_TENSORS] == 10
    assert a[sc.ATTR_WSYNC_BYTES] == 40 * KB and a[sc.ATTR_WSYNC_MODE] == "nccl" and a[sc.ATTR_GLOBAL_STEP] == 3
    assert 0.1 <= a[sc.ATTR_WSYNC_GATHER_S] < 0.25  # 10 pulls of 10 ms
    assert 0.3 <= a[sc.ATTR_WSYNC_TRANSFER_S] < 0.45
    buckets = sorted(got[sc.SPAN_WEIGHT_BUCKET], key=lambda b: -b.attributes[sc.ATTR_WSYNC_SECONDS])
    assert len(buckets) == sc.WSYNC_BUCKET_SPANS == a[sc.ATTR_WSYNC_BUCKETS_SPANNED]  # capped
    assert (
        buckets[0].attributes[sc.ATTR_WSYNC_BUCKET_INDEX] == 2 and buckets[0].attributes[sc.ATTR_WSYNC_SECONDS] >= 0.3
    )
    assert buckets[0].attributes[sc.ATTR_WSYNC_BYTES] == 8 * KB
    assert (buckets[0].end_time - buckets[0].start_time) / S >= 0.3  # its real interval
    for part in (*buckets, *got[sc.SPAN_WEIGHT_GATHER], *got[sc.SPAN_WEIGHT_TRANSFER]):
        assert part.parent.span_id == s.context.span_id
    assert got[sc.SPAN_WEIGHT_GATHER][0].attributes[sc.ATTR_WSYNC_BYTES] == 40 * KB


def test_the_last_bucket_goes_after_the_stream_and_a_large_tensor_in_chunks(sdk):
    tracer, exporter = sdk
    _, sync = _sync(tracer, exporter, bucket_spans=1)
    list(sync.stream(_export([25 * KB, 1 * KB])))  # 25 KB: chunks of 10, 10, 5 (+1 KB in the third bucket)
    time.sleep(0.2)  # the engine sends the last bucket
    sync.end()
    (s,) = _spans(exporter)[sc.SPAN_WEIGHT_SYNC]
    assert s.attributes[sc.ATTR_WSYNC_BUCKETS] == 3 and s.attributes[sc.ATTR_WSYNC_BUCKETS_SPANNED] == 1
    (b,) = _spans(exporter)[sc.SPAN_WEIGHT_BUCKET]
    assert b.attributes[sc.ATTR_WSYNC_BUCKET_INDEX] == 2 and b.attributes[sc.ATTR_WSYNC_BYTES] == 6 * KB
    assert b.attributes[sc.ATTR_WSYNC_SECONDS] >= 0.2


def test_the_stream_stays_lazy_and_its_errors_pass_untouched(sdk):
    tracer, exporter = sdk
    pulled: list[int] = []
    boom = ValueError("export failed")

    def export():
        for i in range(3):
            pulled.append(i)
            if i == 2:
                raise boom
            yield f"w{i}", torch.zeros(8, dtype=torch.uint8)

    _, sync = _sync(tracer, exporter)
    stream = sync.stream(export())
    assert pulled == []  # nothing pulled before the consumer asks
    assert next(stream)[0] == "w0" and pulled == [0]
    with pytest.raises(ValueError) as caught:
        list(stream)
    assert caught.value is boom
    sync.end(boom)
    (s,) = _spans(exporter)[sc.SPAN_WEIGHT_SYNC]
    assert not s.status.is_ok and s.attributes[sc.ATTR_WSYNC_TENSORS] == 2


def test_an_async_export_is_timed_too(sdk):
    tracer, exporter = sdk

    async def export():
        for i in range(4):
            await asyncio.sleep(0.01)
            yield f"w{i}", torch.zeros(4 * KB, dtype=torch.uint8)

    async def consume(weights):
        return [name async for name, _ in weights]

    _, sync = _sync(tracer, exporter)
    assert asyncio.run(consume(sync.stream(export()))) == ["w0", "w1", "w2", "w3"]
    sync.end()
    (s,) = _spans(exporter)[sc.SPAN_WEIGHT_SYNC]
    assert s.attributes[sc.ATTR_WSYNC_BUCKETS] == 2 and s.attributes[sc.ATTR_WSYNC_GATHER_S] >= 0.04


def test_a_worker_derives_the_trainer_phase_span(sdk):
    tracer, _ = sdk
    step = tracer.start_span("step")
    ctx = phase_context(inject(trace.set_span_in_context(step)), sc.PHASE_UPDATE_WEIGHTS)
    parent = trace.get_current_span(ctx).get_span_context()
    trace_id = step.get_span_context().trace_id
    assert parent.trace_id == trace_id and parent.span_id == phase_span_id(trace_id, sc.PHASE_UPDATE_WEIGHTS)
    assert phase_span_id(trace_id, sc.PHASE_UPDATE_WEIGHTS) != phase_span_id(trace_id + 1, sc.PHASE_UPDATE_WEIGHTS)
    assert phase_context(None, sc.PHASE_UPDATE_WEIGHTS) is None


# -- slow-steps names the part ---------------------------------------------------------------------------
def _run(tracer, slow_step: int, transfer_s: float, load_s: float | None = None) -> None:
    """Five steps; ``slow_step``'s weight sync transfers for ``transfer_s``. With ``load_s``, a rollout replica's
    weights.receive too: the slow step's replica loads for ``load_s`` and waits on the sender for the rest."""
    t = time.time_ns() - 3600 * S
    for n in range(1, 6):
        step = tracer.start_span(sc.SPAN_STEP, start_time=t, attributes={sc.ATTR_GLOBAL_STEP: n})
        ctx = trace.set_span_in_context(step)
        sync_s = transfer_s + 0.2 if n == slow_step else 0.3
        actor = tracer.start_span(sc.PHASE_UPDATE_ACTOR, ctx, start_time=t, attributes={sc.ATTR_PHASE: "update_actor"})
        actor.end(end_time=t + S)
        phase = tracer.start_span(
            sc.PHASE_UPDATE_WEIGHTS, ctx, start_time=t + S, attributes={sc.ATTR_PHASE: sc.PHASE_UPDATE_WEIGHTS}
        )
        attrs = {
            sc.ATTR_WSYNC_GATHER_S: 0.1,
            sc.ATTR_WSYNC_TRANSFER_S: sync_s - 0.15,
            sc.ATTR_WSYNC_BYTES: 3 * 2**20,
            sc.ATTR_WSYNC_TENSORS: 12,
            sc.ATTR_WSYNC_BUCKETS: 2,
            sc.ATTR_WSYNC_MODE: "naive",
        }
        sync = tracer.start_span(
            sc.SPAN_WEIGHT_SYNC, trace.set_span_in_context(phase), start_time=t + S, attributes=attrs
        )
        end = t + S + int(sync_s * S)
        sync.end(end_time=end)
        if load_s is not None:
            loaded = load_s if n == slow_step else 0.05
            received = {
                sc.ATTR_WSYNC_RECEIVE_S: sync_s - loaded,
                sc.ATTR_WSYNC_LOAD_S: loaded,
                sc.ATTR_WSYNC_BYTES: 3 * 2**20,
                sc.ATTR_WSYNC_TENSORS: 12,
                sc.ATTR_WSYNC_BUCKETS: 2,
            }
            receive = tracer.start_span(
                sc.SPAN_WEIGHT_RECEIVE, trace.set_span_in_context(phase), start_time=t + S, attributes=received
            )
            receive.end(end_time=end)
        phase.end(end_time=end + S // 100)
        step.end(end_time=end + S // 50)
        t = end + S


def test_slow_steps_names_the_weight_sync_part(sdk, tmp_path):
    tracer, exporter = sdk
    _run(tracer, slow_step=4, transfer_s=5.0)
    spans = exporter.get_finished_spans()
    steps = build_steps(parse_request(otlp_json(list(spans))))
    assert sc.SPAN_WEIGHT_SYNC not in steps[0].phases
    write_lines(tmp_path / "traces.jsonl", list(spans))
    streamed, _ = read_steps(tmp_path / "traces.jsonl")
    assert [s.weight_syncs for s in streamed] == [s.weight_syncs for s in steps]
    for got in (steps, streamed):
        ranking = rank(got, 1)
        first = to_json(ranking, None)[0]
        assert first["global_step"] == 4 and first["cause"]["phase"] == sc.PHASE_UPDATE_WEIGHTS
        sync = first["weight_sync"]
        assert sync["part"] == "bucket transfer" and sync["transfer_s"] == pytest.approx(5.05)
        assert sync["buckets"] == 2 and sync["bytes"] == 3 * 2**20 and sync["mode"] == "naive"
        text = to_text(ranking, None)
        assert "update_weights" in text and ": bucket transfer 5.05s of 5.20s" in text
        assert (
            "weight sync: bucket transfer took 5.05s of 5.20s (gather 0.10s; 2 buckets, 3.0 MiB in 12 tensors" in text
        )


def test_no_weight_sync_line_when_the_sync_did_not_make_the_step_slow(sdk):
    tracer, exporter = sdk
    _run(tracer, slow_step=0, transfer_s=0.0)  # no slow sync
    ranking = rank(build_steps(parse_request(otlp_json(list(exporter.get_finished_spans())))), 5)
    assert all("weight sync:" not in line for line in to_text(ranking, None).splitlines())
    assert all(v["weight_sync"]["part"] == "bucket transfer" for v in to_json(ranking, None))


@pytest.mark.parametrize(
    ("load_s", "part", "line"),
    [
        (4.0, "loading into the rollout engine", "weight receive: loading into the rollout engine 4.00s of 5.20s"),
        (0.5, "waiting on the sender", "weight receive: waiting on the sender 4.70s of 5.20s (received 4.70s, loaded"),
    ],
)
def test_slow_steps_names_the_replicas_side_of_a_slow_sync(sdk, tmp_path, load_s, part, line):
    """The replica's weights.receive says whether it waited on the sender or its rollout engine loaded slowly."""
    tracer, exporter = sdk
    _run(tracer, slow_step=4, transfer_s=5.0, load_s=load_s)
    spans = list(exporter.get_finished_spans())
    write_lines(tmp_path / "traces.jsonl", spans)
    streamed, _ = read_steps(tmp_path / "traces.jsonl")
    for got in (build_steps(parse_request(otlp_json(spans))), streamed):
        ranking = rank(got, 1)
        first = to_json(ranking, None)[0]
        assert first["global_step"] == 4 and first["weight_receive"]["part"] == part
        assert first["weight_receive"]["load_s"] == pytest.approx(load_s)
        assert sc.SPAN_WEIGHT_RECEIVE not in got[0].phases
        assert line in to_text(ranking, None)
