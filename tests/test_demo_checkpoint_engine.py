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


def test_gloo_engine_moves_every_tensor_bucket_by_bucket():
    cls = CheckpointEngineRegistry.get(BACKEND)
    sender, receiver = cls(bucket_size=80, is_master=True), cls(bucket_size=80)
    actor_kw, rollout_kw = cls.build_topology(1, 1, [sender.prepare(), receiver.prepare()])
    inits = [
        threading.Thread(target=e.init_process_group, kwargs={k: v[0] for k, v in kw.items()})
        for e, kw in ((sender, actor_kw), (receiver, rollout_kw))
    ]
    for t in inits:
        t.start()
    for t in inits:
        t.join(60)
    buckets = []
    send_bucket = sender._send_bucket

    async def counting(meta, parts, last):
        buckets.append([m[0] for m in meta])
        return await send_bucket(meta, parts, last)

    sender._send_bucket = counting

    result: dict = {}

    async def received() -> list[tuple[str, torch.Tensor]]:
        try:
            return [item async for item in receiver.receive_weights(global_steps=1)]
        except Exception as exc:  # the sender then waits in gloo: report this, not a hang
            result["error"] = exc
            raise

    async def both():
        result["value"] = await asyncio.gather(sender.send_weights(iter(_weights()), global_steps=1), received())

    loop = threading.Thread(target=lambda: asyncio.run(both()), daemon=True)
    loop.start()
    loop.join(60)
    assert "error" not in result, repr(result["error"])
    assert "value" in result, "the transfer did not finish"
    metrics, got = result["value"]
    sender.finalize()
    receiver.finalize()
    want = _weights()
    assert [n for n, _ in got] == [n for n, _ in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    assert buckets == [["b", "a"], ["c"], ["d"]], buckets
    assert metrics == {"checkpoint_engine/payload_mbytes": sum(t.nbytes for _, t in want) / (1 << 20)}
    assert receiver.bytes_moved == sender.bytes_moved == sum(t.nbytes for _, t in want)


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
