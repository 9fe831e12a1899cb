"""The demo's only stand-ins, plugged in through verl's own extension points:

- ``CpuResourcePoolManager``: real ``RayResourcePool`` objects with CPU bundles (verl's manager
  hard-codes GPUs);
- ``StubLLMServer`` + ``StubReplica`` (``RolloutReplicaRegistry``, ``rollout.name=cpu_stub``): a
  token-in/token-out "vLLM" that answers random words ending in ``#### N`` after 5-30 ms, refuses to
  generate while asleep (so verl's real sleep / weight-sync / wake order is exercised), keeps vLLM's
  abort / resume gate (partial rollouts of the async trainers) and receives the real weight sync;
  a standalone replica (separate_async) runs verl's real ``CheckpointEngineWorker`` as its rollout
  worker, fed by :mod:`verl_otel.demo.cpu_checkpoint_engine`;
- ``StubServerAdapter`` (worker side, ``_ROLLOUT_REGISTRY``): consumes the FSDP actor's real per-tensor
  weight export and forwards a checksum to its server.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Generator
from typing import Any, ClassVar, cast

import ray
import torch
from verl.single_controller.ray import ResourcePoolManager
from verl.single_controller.ray.base import RayResourcePool
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import (
    RolloutReplica,
    RolloutReplicaRegistry,
    TokenOutput,
)

from verl_otel import runtime
from verl_otel import semconv as sc
from verl_otel.demo import tool_agent
from verl_otel.demo.slow import RequestDelays, planted_hang
from verl_otel.hooks._safe import safe
from verl_otel.hooks.stall_watch import unwatch, watch

SERVER_NAME = "verl_otel_demo_llm_{}"


class _CpuPool(RayResourcePool):
    """A pool of CPU bundles. Spanning several nodes (``trainer.nnodes``), each node's placement group is pinned to
    its own node by Ray's ``node:<ip>`` resource: GPU bundles land on distinct nodes because each node has only
    so many GPUs, CPU bundles would all fit on one."""

    def get_placement_groups(self, strategy: str = "STRICT_PACK", name: Any = None, device_name: str = "cuda") -> Any:
        if self.pgs is None and len(self._store) > 1:
            from ray.util.placement_group import placement_group
            from verl.single_controller.ray.base import sort_placement_group_by_node_ip

            ips = sorted({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")})
            if len(ips) >= len(self._store):
                prefix = name or f"{self.name_prefix}verl_group_{'_'.join(map(str, self._store))}:"
                pgs = [
                    placement_group(
                        [{"CPU": self.max_colocate_count, f"node:{ip}": 0.001} for _ in range(count)],
                        strategy=strategy,
                        name=f"{prefix}{i}",
                    )
                    for i, (ip, count) in enumerate(zip(ips, self._store, strict=False))
                ]
                ray.get([pg.ready() for pg in pgs])
                self.pgs = sort_placement_group_by_node_ip(pgs)  # type: ignore[assignment]
        return super().get_placement_groups(strategy, name, device_name)


class CpuResourcePoolManager(ResourcePoolManager):
    def create_resource_pool(self) -> None:
        for name, process_on_nodes in self.resource_pool_spec.items():
            self.resource_pool_dict[name] = _CpuPool(
                process_on_nodes=process_on_nodes, use_gpu=False, max_colocate_count=1, name_prefix=name
            )

    def _check_resource_available(self) -> None:  # counts GPUs only
        return None


@ray.remote(num_cpus=0)
class StubLLMServer:
    def __init__(
        self, token_ids: dict[str, int], eos_id: int, response_length: int, seed: int = 0, awake: bool = False
    ) -> None:
        self.rng = random.Random(seed)
        self.tok = token_ids
        self.word_ids = [v for k, v in token_ids.items() if not k.isdigit() and k != "####" and k[:1] not in '<{"']
        # --agent tool: tool calls, turn by turn
        self.script = tool_agent.Script(token_ids) if tool_agent.on() else None
        self.eos_id = eos_id
        self.response_length = response_length
        self.awake = awake  # a hybrid server sleeps until its first weight sync; a standalone one serves
        # vLLM's abort gate: abort_all_requests closes it (in-flight requests return what they have,
        # stop_reason "aborted", and verl's FullyAsyncLLMServerClient resumes them); requests behind
        # the closed gate wait for resume_generation(), or are turned away when reject_request=True
        self.gate_open = asyncio.Event()
        self.gate_open.set()
        self.rejecting = False
        self.abort_epoch = 0
        self.n_aborted = 0
        self.version = 0
        self.delays = RequestDelays()
        self.n_requests = 0
        self.weight_syncs = 0
        safe(runtime.current().declare, sc.PROCESS_ROLE_ROLLOUT_SERVER)  # its stall files and spans say what it is

    async def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        **kwargs: Any,
    ) -> TokenOutput:
        while not self.gate_open.is_set():
            if self.rejecting:
                return TokenOutput(
                    token_ids=[], log_probs=None, stop_reason="aborted", extra_fields={"global_steps": self.version}
                )
            await self.gate_open.wait()
        if not self.awake:
            raise RuntimeError("StubLLMServer.generate called while asleep (weight-sync order violated)")
        self.n_requests += 1
        # watched as vLLM's requests are (hooks/engine.py), under the sample's context when the client sent it
        token = safe(watch, sc.CALL_SERVER_REQUEST, _traceparent(sampling_params))
        try:
            return await self._generate(sampling_params, prompt_ids)
        finally:
            safe(unwatch, token)

    async def _generate(self, sampling_params: dict[str, Any], prompt_ids: list[int] | None = None) -> TokenOutput:
        epoch = self.abort_epoch
        delay = self.rng.uniform(0.005, 0.03)
        if float(sampling_params.get("temperature", 0) or 0) > 0:  # training rollouts sample; validation is greedy
            step = self.version + 1  # weights of step k-1 generate step k
            delay += self.delays.rollout_s(step) + self.delays.tail_s(step)
            hang = self.delays.hang_s(step)
            if hang:  # --hang rollout: the server's event loop blocks, as a wedged engine's would
                planted_hang(hang)
        elif slow_s := self.delays.validate_s(self.version):  # validation runs on the weights of the step it checks
            await asyncio.to_thread(slowed_decode, slow_s)
        await asyncio.sleep(delay)
        body = [self.rng.choice(self.word_ids) for _ in range(self.rng.randint(1, max(1, self.response_length - 4)))]
        budget = min(self.response_length, int(sampling_params.get("max_tokens") or self.response_length))
        tokens = [*body, self.tok["####"], self.tok[str(self.rng.randint(2, 14))], self.eos_id][: max(1, budget)]
        call = self.script.answer(prompt_ids or []) if self.script is not None else None
        if call is not None:  # the hermes tool call verl's parser reads
            tokens = [*(self.tok[w] for w in call), self.eos_id]
        stop = "completed"
        if self.abort_epoch != epoch:  # aborted while "decoding": hand back the first half
            self.n_aborted += 1
            tokens, stop = tokens[: len(tokens) // 2], "aborted"
        log_probs = [-self.rng.random() * 3 for _ in tokens] if sampling_params.get("logprobs") else None
        return TokenOutput(
            token_ids=tokens,
            log_probs=log_probs,
            stop_reason=stop,
            num_preempted=0,
            extra_fields={"global_steps": self.version},
        )

    async def receive_weights(self, global_steps: int | None, n_tensors: int, checksum: float) -> None:
        self.weight_syncs += 1
        if global_steps is not None:
            self.version = int(global_steps)

    async def wake_up(self, version: Any = None, tags: Any = None) -> None:
        self.awake = True

    async def sleep(self) -> None:
        self.awake = False

    async def clear_kv_cache(self) -> None: ...

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        self.abort_epoch += 1
        self.rejecting = reject_request
        self.gate_open.clear()
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        self.rejecting = False
        self.gate_open.set()

    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def start_profile(self, **kwargs: Any) -> None: ...
    async def stop_profile(self) -> None: ...

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.n_requests,
            "weight_syncs": self.weight_syncs,
            "version": self.version,
            "aborted": self.n_aborted,
        }


def slowed_decode(seconds: float) -> None:  # the frame a stall of a slowed validation names (--slow validate)
    """The stand-in engine's work for one request, ``seconds`` longer: in a thread, as an engine's forward runs
    beside the server's event loop (which goes on answering)."""
    time.sleep(seconds)


def _traceparent(sampling_params: dict[str, Any]) -> str | None:
    extra = sampling_params.get("extra_args")
    tp = extra.get(sc.TRACEPARENT_KEY) if isinstance(extra, dict) else None
    return tp if isinstance(tp, str) else None


class StubReplica(RolloutReplica):
    server_kwargs: ClassVar[dict[str, Any]] = {}

    async def init_standalone(self) -> None:
        standalone_workers(self)
        await self.launch_servers()

    async def launch_servers(self) -> None:
        from verl.workers.rollout.replica import RolloutMode

        if not self.server_kwargs:
            type(self).server_kwargs = _server_kwargs(self.config)
        # a @ray.remote class: Ray gives it .options
        server = (
            cast(Any, StubLLMServer)
            .options(name=SERVER_NAME.format(self.replica_rank))
            .remote(awake=self.rollout_mode == RolloutMode.STANDALONE, **self.server_kwargs)
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"stub-llm-{self.replica_rank}:0"


def standalone_workers(replica: Any) -> None:
    """verl's ``RolloutReplica.init_standalone`` reserves a GPU placement group and starts a
    ``RayWorkerGroup`` of its ``CheckpointEngineWorker``; here the same worker class runs as one 0-CPU actor
    per rank (the demo's Ray has no CPU to spare for another placement group), with the environment a
    ``RayWorkerGroup`` would give it. The replica's ``launch_servers`` then starts its server(s)."""
    from verl.checkpoint_engine.base import CheckpointEngineWorker
    from verl.utils.net_utils import get_free_port
    from verl.workers.rollout.replica import RolloutMode

    replica.rollout_mode = RolloutMode.STANDALONE
    host = ray.util.get_node_ip_address().strip("[]")
    port, _ = get_free_port(host)
    prefix = f"rollout_standalone_{replica.replica_rank}"
    workers: list[Any] = []
    for rank in range(replica.world_size):
        env = {
            "WORLD_SIZE": str(replica.world_size),
            "RANK": str(rank),
            "WG_PREFIX": prefix,
            "WG_BACKEND": "ray",
            "RAY_LOCAL_WORLD_SIZE": str(replica.world_size),
            "MASTER_ADDR": host,
            "MASTER_PORT": str(port),
        }
        workers.append(
            ray.remote(CheckpointEngineWorker)
            .options(num_cpus=0, name=f"{prefix}CheckpointEngineWorker_0:{rank}", runtime_env={"env_vars": env})
            .remote(rollout_config=replica.config, model_config=replica.model_config, replica_rank=replica.replica_rank)
        )
    replica.workers = workers


def _server_kwargs(rollout_config: Any) -> dict[str, Any]:
    from transformers import AutoTokenizer

    model_path = os.environ["VERL_OTEL_DEMO_MODEL"]
    tok = AutoTokenizer.from_pretrained(model_path)
    return {
        "token_ids": tok.get_vocab(),
        "eos_id": tok.eos_token_id,
        "response_length": int(rollout_config.response_length),
    }


def register_replica() -> None:
    RolloutReplicaRegistry.register("cpu_stub", lambda: StubReplica)


class StubServerAdapter(BaseRollout):
    """Like vLLM's ServerAdapter: the FSDP worker's client to its rollout server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1, **kwargs: Any):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        world = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self._has_server = rank % world == 0
        self._handle: Any = None

    def _server(self) -> Any:
        if self._has_server and self._handle is None:
            self._handle = ray.get_actor(SERVER_NAME.format(self.replica_rank))
        return self._handle

    async def resume(self, tags: list[str]) -> None:
        if "kv_cache" in tags and self._server() is not None:
            await self._server().wake_up.remote(tags=tags)

    async def release(self) -> None:
        if self._server() is not None:
            await self._server().sleep.remote()

    @torch.no_grad()
    async def update_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        wire_format: str = "named_tensors",
        global_steps: int | None = None,
        **kwargs: Any,
    ):
        from verl_otel.demo.cpu_checkpoint_engine import held_transfer, slowed_transfer

        delay_s = 0.0
        if not hasattr(weights, "__aiter__"):  # a hybrid sync (a checkpoint engine's sender holds its own)
            held_transfer(global_steps)  # --hang update_weights
            delay_s = slowed_transfer(global_steps)  # --slow update_weights: its sender slows its own
        n_tensors, checksum = 0, 0.0
        # the real FSDP per-tensor export (hybrid), or what a checkpoint engine received (standalone)
        items = weights if hasattr(weights, "__aiter__") else _aiter(weights)
        async for _name, tensor in items:
            n_tensors += 1
            checksum += float(tensor.float().sum())
            if delay_s:  # a slow load of the first bucket (the demo's tiny model fits one)
                slowed_load(delay_s)
                delay_s = 0.0
        if self._server() is not None:
            await self._server().receive_weights.remote(global_steps, n_tensors, checksum)


def slowed_load(seconds: float) -> None:  # the frame a stall of a slowed colocated weight sync names
    """``--slow update_weights`` (colocated): loading the bucket into the engine takes ``seconds`` longer, on the
    worker's event loop, as a copy into the engine's weights holds it."""
    time.sleep(seconds)


async def _aiter(items: Any) -> Any:
    for item in items:
        yield item
