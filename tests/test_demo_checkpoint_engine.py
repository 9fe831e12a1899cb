"""The demo's gloo checkpoint engine (separate_async's weight transport on a CPU), driven through verl's
registry and its manager's call order, between two ranks of a real gloo group: every tensor arrives intact,
bucket by bucket, whatever its dtype and size (the e2e run only ever sends one bucket)."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from verl.checkpoint_engine.base import CheckpointEngineRegistry

from verl_otel.demo.cpu_checkpoint_engine import BACKEND


def _weights() -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        ("b", torch.randn(7, generator=g).to(torch.bfloat16)),  # 14 bytes: what follows is misaligned
        ("a", torch.randn(3, 5, generator=g)),  # 60 bytes, at offset 14 of the first bucket
        ("c", torch.randn(40, generator=g)),  # 160 bytes: larger than a bucket, goes alone
        ("d", torch.arange(5, dtype=torch.int64)),
    ]


def _engines(bucket_size: int = 80):
    cls = CheckpointEngineRegistry.get(BACKEND)
    sender, receiver = cls(bucket_size=bucket_size, is_master=True), cls(bucket_size=bucket_size)
    actor_kw, rollout_kw = cls.build_topology(1, 1, [sender.prepare(), receiver.prepare()])
    inits = [
        threading.Thread(target=e.init_process_group, kwargs={k: v[0] for k, v in kw.items()})
        for e, kw in ((sender, actor_kw), (receiver, rollout_kw))
    ]
    for t in inits:
        t.start()
    for t in inits:
        t.join(60)
    return sender, receiver


def _transfer(sender, receiver, weights, step: int = 1):
    result: dict = {}

    async def received() -> list[tuple[str, torch.Tensor]]:
        try:
            return [item async for item in receiver.receive_weights(global_steps=step)]
        except Exception as exc:  # the sender then waits in gloo: report this, not a hang
            result["error"] = exc
            raise

    async def both():
        result["value"] = await asyncio.gather(sender.send_weights(weights, global_steps=step), received())

    loop = threading.Thread(target=lambda: asyncio.run(both()), daemon=True)
    loop.start()
    loop.join(60)
    assert "error" not in result, repr(result["error"])
    assert "value" in result, "the transfer did not finish"
    return result["value"]


def test_gloo_engine_moves_every_tensor_bucket_by_bucket():
    sender, receiver = _engines()
    buckets = []
    send_bucket = sender._send_bucket

    async def counting(meta, parts, last, delay_s=0.0):
        buckets.append([m[0] for m in meta])
        return await send_bucket(meta, parts, last, delay_s)

    sender._send_bucket = counting
    metrics, got = _transfer(sender, receiver, iter(_weights()))
    sender.finalize()
    receiver.finalize()
    want = _weights()
    assert [n for n, _ in got] == [n for n, _ in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    assert buckets == [["b", "a"], ["c"], ["d"]], buckets
    assert metrics == {"checkpoint_engine/payload_mbytes": sum(t.nbytes for _, t in want) / (1 << 20)}
    assert receiver.bytes_moved == sender.bytes_moved == sum(t.nbytes for _, t in want)


def test_slow_update_weights_slows_the_first_bucket_and_the_parts_say_so(monkeypatch):
    """``--slow update_weights@2=0.6``: the first bucket's send of step 2 waits (once); the sync's parts, timed
    from the export this engine consumes (telemetry/weight_sync_parts.py), put the time on that bucket's transfer."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from verl_otel import semconv as sc
    from verl_otel.demo.slow import ENV
    from verl_otel.telemetry.weight_sync_parts import WeightSync

    monkeypatch.setenv(ENV, "update_weights@2=0.6")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    sender, receiver = _engines()
    for step in (2, 2, 3):  # the second sync of step 2 (another process' share) is not slowed again
        sync = WeightSync(tracer, trace.set_span_in_context(trace.INVALID_SPAN), BACKEND, 80, step)
        _transfer(sender, receiver, sync.stream(iter(_weights())), step)
        sync.end()
    sender.finalize()
    receiver.finalize()
    syncs = [s for s in exporter.get_finished_spans() if s.name == sc.SPAN_WEIGHT_SYNC]
    transfer = [s.attributes[sc.ATTR_WSYNC_TRANSFER_S] for s in syncs]
    assert transfer[0] >= 0.6 and transfer[1] < 0.3 and transfer[2] < 0.3, transfer
    # verl's rule, which NCCL follows, chunks "c" (160 bytes) into two buckets: 4; this engine sends it whole (3)
    assert [s.attributes[sc.ATTR_WSYNC_BUCKETS] for s in syncs] == [4, 4, 4]
    slow = max(
        (s for s in exporter.get_finished_spans() if s.name == sc.SPAN_WEIGHT_BUCKET),
        key=lambda s: s.attributes[sc.ATTR_WSYNC_SECONDS],
    )
    assert slow.attributes[sc.ATTR_WSYNC_BUCKET_INDEX] == 0 and slow.attributes[sc.ATTR_WSYNC_SECONDS] >= 0.6
    provider.shutdown()


def test_the_master_listens_on_the_port_it_announces():
    """The port goes out in prepare's metadata and is used in init_process_group, after verl has gathered
    every rank's metadata: it must be held from the start, or another process can take it in between."""
    import socket

    engine = CheckpointEngineRegistry.get(BACKEND)(bucket_size=80, is_master=True)
    master = engine.prepare()
    try:
        with socket.socket() as s, pytest.raises(OSError):  # the port is taken: by the master's store
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("", master["port"]))
    finally:
        engine.finalize()
