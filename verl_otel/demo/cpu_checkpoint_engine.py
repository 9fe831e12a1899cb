"""A CPU checkpoint engine for the demo's ``separate_async`` trainer, registered in verl's own
``CheckpointEngineRegistry`` and loaded by verl through
``actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module`` (the demo sets both).

verl refuses the in-process ``naive`` engine in separate_async mode: weights must travel from the
FSDP actor process to the standalone rollout's ``CheckpointEngineWorker`` in another process, which
verl does with NCCL/NIXL/Mooncake on GPUs. This engine is the stand-in for that transport: the same
protocol verl's NCCL engine follows (``prepare`` -> ``build_topology`` -> ``init_process_group`` ->
``send_weights`` / ``receive_weights`` -> ``finalize``, actor rank 0 the only sender, weights packed
into byte buckets) over a private gloo process group on the CPU. The bytes really move between the
processes; the stand-in LLM server only counts what arrives (it generates without weights).
"""

from __future__ import annotations

import asyncio
import pickle
import time
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry

from verl_otel.demo.slow import HANG_ENV, SlowSpec

BACKEND = "cpu_gloo"
_TIMEOUT = timedelta(seconds=300)
#: verl's own key for the bytes one weight sync moved (its delta engine reports the same)
_PAYLOAD_KEY = "checkpoint_engine/payload_mbytes"


async def _items(weights: Any) -> AsyncIterator[tuple[str, torch.Tensor]]:
    if hasattr(weights, "__aiter__"):
        async for item in weights:
            yield item
    else:
        for item in weights:
            yield item


_held: set[int] = set()  # steps whose weight transfer this process held (--hang update_weights)


def held_transfer(global_steps: int | None) -> None:
    """``--hang update_weights@STEP``: the weight transfer after step STEP waits (once per process and step;
    a process sending over gloo and to its hybrid server holds the first). Nothing here tells verl-otel: the
    hooks on verl's worker-side ``update_weights`` (hooks/weight_sync.py) watch the sync this holds up."""
    seconds = SlowSpec.from_env(HANG_ENV).seconds("update_weights", global_steps or 0)
    if not seconds or global_steps in _held:
        return
    _held.add(int(global_steps or 0))
    _wait_for_transfer(seconds)


_slowed: set[int] = set()  # steps whose weight transfer this process slowed (--slow update_weights)


def slowed_transfer(global_steps: int | None) -> float:
    """``--slow update_weights@STEP=S``: the seconds the first bucket of the transfer after step STEP takes longer
    (once per process and step), else 0. Slept by the transfer itself, between the bucket's bytes."""
    seconds = SlowSpec.from_env().seconds("update_weights", global_steps or 0)
    if not seconds or global_steps in _slowed:
        return 0.0
    _slowed.add(int(global_steps or 0))
    return seconds


def slowed_send(seconds: float) -> None:  # the frame a stall of a slowed checkpoint-engine sync names
    """``--slow update_weights`` through a checkpoint engine: the sender's transfer thread spends ``seconds`` more
    on the payload, as a slow link holds a real engine's broadcast thread (verl's NCCL engine broadcasts in an
    executor thread); the receivers wait for it."""
    time.sleep(seconds)


def _wait_for_transfer(seconds: float) -> None:
    """The planted hang: a transfer whose other side does not answer, for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    if hasattr(tensor, "full_tensor"):  # a DTensor shard: the sender exports whole tensors
        tensor = tensor.full_tensor()
    return tensor.detach().to("cpu").contiguous().view(-1).view(torch.uint8)


@CheckpointEngineRegistry.register(BACKEND)
class GlooCheckpointEngine(CheckpointEngine):
    """One sender (actor rank 0) broadcasts byte buckets to every rollout worker over gloo.

    A bucket goes out as three broadcasts: a header (metadata length, payload length, last-bucket
    flag), the pickled tensor metadata, then the payload. The group is built for each sync (verl's
    manager calls ``prepare``/``init_process_group`` before every ``update_weights``)."""

    def __init__(self, bucket_size: int, is_master: bool = False, **_kwargs: Any) -> None:
        self.bucket_size = bucket_size
        self.is_master = is_master
        self.rank = -1
        self._pg: Any = None
        self._store: Any = None
        self.syncs = 0
        self.bytes_moved = 0

    # -- topology ---------------------------------------------------------------------------
    def prepare(self) -> dict[str, Any]:
        if not self.is_master:
            return {}
        import ray

        host = ray.util.get_node_ip_address().strip("[]")
        # The store listens from here on, on a port the OS picks: a port found free now and bound only
        # in init_process_group can be taken in between (CI saw EADDRINUSE once in a fully_async run).
        self._store = dist.TCPStore(host, 0, None, True, timeout=_TIMEOUT, wait_for_workers=False)
        return {"host": host, "port": self._store.port}

    @classmethod
    def build_topology(
        cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict[str, Any]]
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        master = metadata[0]
        assert master.get("port"), "actor rank 0 must be the checkpoint engine master"
        world = 1 + rollout_world_size
        actor: dict[str, list[Any]] = {
            "rank": [0] + [-1] * (actor_wg_world_size - 1),
            "world_size": [world] * actor_wg_world_size,
            "master": [master] * actor_wg_world_size,
        }
        rollout: dict[str, list[Any]] = {
            "rank": list(range(1, world)),
            "world_size": [world] * rollout_world_size,
            "master": [master] * rollout_world_size,
        }
        return actor, rollout

    # verl calls it with the keywords build_topology returned (its base class declares **kwargs)
    def init_process_group(self, rank: int, world_size: int, master: dict[str, Any]) -> None:  # type: ignore[override]
        self.rank = rank
        if rank < 0:  # an actor rank that only walks its export (producing it is collective)
            return
        if rank != 0:  # rank 0 is the master (build_topology): its store listens since prepare
            self._store = dist.TCPStore(master["host"], master["port"], world_size, False, timeout=_TIMEOUT)
        self._pg = dist.ProcessGroupGloo(self._store, rank, world_size, _TIMEOUT)

    def finalize(self) -> None:
        self._pg = None
        self._store = None

    # -- transfer ---------------------------------------------------------------------------
    async def _broadcast(self, tensor: torch.Tensor) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        work = self._pg.broadcast([tensor], opts)
        await asyncio.to_thread(work.wait)  # keep the worker's event loop free while bytes move

    async def _send_bucket(
        self, meta: list[tuple[Any, ...]], parts: list[torch.Tensor], last: bool, delay_s: float = 0.0
    ) -> int:
        meta_bytes = torch.frombuffer(bytearray(pickle.dumps(meta)), dtype=torch.uint8)
        payload = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)
        await self._broadcast(torch.tensor([meta_bytes.numel(), payload.numel(), int(last)], dtype=torch.int64))
        await self._broadcast(meta_bytes)
        if delay_s:  # --slow update_weights: a slow link, the receivers wait for the payload
            await asyncio.to_thread(slowed_send, delay_s)
        if payload.numel():
            await self._broadcast(payload)
        return payload.numel()

    @torch.no_grad()
    async def send_weights(
        self, weights: Iterable[tuple[str, torch.Tensor]] | Any, global_steps: int | None = None
    ) -> dict[str, float]:
        if self.rank == 0:
            held_transfer(global_steps)
        if self.rank < 0:
            async for _ in _items(weights):
                pass
            return {}
        meta: list[tuple[Any, ...]] = []
        parts: list[torch.Tensor] = []
        filled = sent = 0
        delay_s = slowed_transfer(global_steps)
        async for name, tensor in _items(weights):
            raw = _as_bytes(tensor)
            if parts and filled + raw.numel() > self.bucket_size:  # a tensor larger than a bucket goes alone
                sent += await self._send_bucket(meta, parts, last=False, delay_s=delay_s)
                meta, parts, filled, delay_s = [], [], 0, 0.0
            meta.append((name, tensor.dtype, tuple(tensor.shape), filled, raw.numel()))
            parts.append(raw)
            filled += raw.numel()
        sent += await self._send_bucket(meta, parts, last=True, delay_s=delay_s)
        self.syncs += 1
        self.bytes_moved += sent
        return {_PAYLOAD_KEY: sent / (1 << 20)}

    # verl iterates it with `async for` (its base class annotates a coroutine returning a generator)
    async def receive_weights(  # type: ignore[override]
        self, global_steps: int | None = None
    ) -> AsyncIterator[tuple[str, torch.Tensor]]:
        while True:
            header = torch.zeros(3, dtype=torch.int64)
            await self._broadcast(header)
            meta_len, payload_len, last = (int(x) for x in header)
            meta_bytes = torch.empty(meta_len, dtype=torch.uint8)
            await self._broadcast(meta_bytes)
            payload = torch.empty(payload_len, dtype=torch.uint8)
            if payload_len:
                await self._broadcast(payload)
            self.bytes_moved += payload_len
            for name, dtype, shape, offset, nbytes in pickle.loads(meta_bytes.numpy().tobytes()):
                # clone: a view of another dtype needs an aligned storage offset
                yield name, payload[offset : offset + nbytes].clone().view(dtype).view(shape)
            if last:
                self.syncs += 1
                return
