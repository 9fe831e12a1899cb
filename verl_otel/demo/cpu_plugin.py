"""verl plugin for the CPU demo. verl imports it itself, at ``import verl`` in every process, because
the demo's environment carries ``VERL_USE_EXTERNAL_MODULES=verl_otel.demo.cpu_plugin``. Everything it
does goes through verl's public extension points or module attributes; no verl file changes:

1. a ``cpu`` platform (``VERL_PLATFORM=cpu``) whose device module is a CPU-backed stand-in of torch.cuda;
2. the ``cpu_stub`` rollout: the worker-side adapter (``_ROLLOUT_REGISTRY``) and the server replica
   (``RolloutReplicaRegistry``);
3. CPU resource pools for both trainers (``ResourcePoolManager`` of the legacy and v1 modules);
4. a plain gloo process group in verl's worker-group processes (verl's own CPU backend string,
   ``cpu:gloo,cpu:gloo``, is rejected by torch: "Duplicate device type cpu");
5. ``--slow`` delays and ``--hang`` hangs inside the real workers, and ``--linger`` (keep the run's processes, and so
   their /metrics, alive after fit(); fully_async's after its trainer's fit);
6. separate_async's "save the model to CPU memory" that really copies on a CPU (see ``_copying_save``).

Hooks on classes that become Ray actors are plain functions (Ray's actor runtime skips wrapt proxies).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import resource
import threading
import time
from typing import Any

import torch
import wrapt
from verl.plugin.platform import PlatformBase, PlatformRegistry

from verl_otel.demo.slow import ENV_FIT_TIMES, HANG_ENV, SlowSpec, planted_hang

ENV_LINGER = "VERL_OTEL_DEMO_LINGER"


class _CpuDevice:
    """What verl calls through ``get_torch_device()``, answered for the CPU."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    is_available = staticmethod(lambda: True)
    device_count = staticmethod(lambda: 1)
    current_device = staticmethod(lambda: 0)
    set_device = synchronize = empty_cache = ipc_collect = staticmethod(lambda *a, **k: None)
    set_per_process_memory_fraction = reset_peak_memory_stats = staticmethod(lambda *a, **k: None)
    memory_allocated = memory_reserved = staticmethod(lambda *a, **k: 0)
    # verl's perf/max_memory_* metrics: the process' peak RSS means something on a CPU
    max_memory_allocated = max_memory_reserved = staticmethod(
        lambda *a, **k: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    get_rng_state = staticmethod(lambda *a, **k: torch.get_rng_state())
    set_rng_state = staticmethod(lambda state, *a, **k: torch.set_rng_state(state))
    manual_seed = manual_seed_all = staticmethod(lambda seed: torch.manual_seed(seed))
    get_device_name = staticmethod(lambda *a, **k: "cpu")

    @staticmethod
    def mem_get_info(*_a: Any, **_k: Any) -> tuple[int, int]:
        import psutil

        vm = psutil.virtual_memory()
        return vm.available, vm.total


_DEVICE = _CpuDevice()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    device_name = property(lambda self: "cpu")
    vendor_name = property(lambda self: "cpu")
    device_module = property(lambda self: _DEVICE)

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return True

    # verl uses it as .to(get_device_id()) and as FSDP's device_id, where a CPU needs "cpu" (the base says int)
    def current_device(self) -> str:  # type: ignore[override]
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: Any) -> None: ...
    def synchronize(self, device_index: Any = None) -> None: ...
    def set_allocator_settings(self, settings: str) -> None: ...
    def empty_cache(self) -> None: ...
    def profiler_start(self) -> None: ...
    def profiler_stop(self) -> None: ...

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Any:
        yield

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None


def _register_rollout_adapter() -> None:
    from verl.workers.rollout import base

    base._ROLLOUT_REGISTRY[("cpu_stub", "async")] = "verl_otel.demo.standins.StubServerAdapter"


def _preinit_gloo() -> None:
    if os.environ.get("WG_BACKEND") != "ray" or "RANK" not in os.environ or "MASTER_ADDR" not in os.environ:
        return
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))


def _linger_seconds() -> float:
    return float(os.environ.get(ENV_LINGER, "0") or 0)


def _record_fit_seconds(start: float) -> None:
    """How long fit() ran (verl-otel's fit-end wait included, Ray's start-up not): the chaos tests compare
    it with a run without telemetry. The demo's own record, written whether telemetry is on or off."""
    path = os.environ.get(ENV_FIT_TIMES)
    if path:
        with open(path, "a") as f:
            f.write(f"{time.monotonic() - start:.3f}\n")


def _lingering(fit: Any) -> Any:
    @functools.wraps(fit)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            return fit(self, *args, **kwargs)
        finally:
            _record_fit_seconds(start)
            seconds = _linger_seconds()
            if seconds > 0:
                print(
                    f"[verl-otel demo] fit() done; keeping the run's processes up for {seconds:g}s (--linger)",
                    flush=True,
                )
                time.sleep(seconds)

    return run


def _cpu_pools(module: Any, trainer_cls: str) -> None:
    from verl_otel.demo.standins import CpuResourcePoolManager

    module.ResourcePoolManager = CpuResourcePoolManager
    cls = getattr(module, trainer_cls)
    cls.fit = _lingering(cls.fit)


def _lingering_async(fit: Any) -> Any:
    @functools.wraps(fit)
    async def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            return await fit(self, *args, **kwargs)
        finally:
            _record_fit_seconds(start)
            if _linger_seconds() > 0:
                print(
                    f"[verl-otel demo] fit() done; keeping the run's processes up for {_linger_seconds():g}s "
                    "(--linger)",
                    flush=True,
                )
                await asyncio.sleep(_linger_seconds())

    return run


def _fully_async_linger(module: Any) -> None:
    """fully_async's task runner lives in the entry module (``__main__`` in the driver, out of reach
    of import hooks) and waits for its trainer and rollouter actors: lingering in the trainer's
    coroutine ``fit`` keeps all of them up."""
    cls = module.FullyAsyncTrainer.__ray_metadata__.modified_class
    cls.fit = _lingering_async(cls.__dict__["fit"])


_PLANTED = threading.local()  # the delay and hang a slowed worker call hands to verl's engine, on its thread


def _slowed(method: Any, phase: str, role_check: Any = None) -> Any:
    """The k-th call of ``method`` in this process (the k-th step) is slowed when --slow says so (hangs when --hang
    does): the delay is handed to the engine's forward-backward inside verl's own call (``_engine_work``), below
    every hook, where a really slow call spends its time."""
    calls = {"n": 0}

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if role_check is None or role_check(self):
            calls["n"] += 1
            delay = SlowSpec.from_env().seconds(phase, calls["n"])
            hang = SlowSpec.from_env(HANG_ENV).seconds(phase, calls["n"])
            if delay or hang:
                _PLANTED.work = (delay, hang)
                try:
                    return method(self, *args, **kwargs)
                finally:
                    _PLANTED.work = None
        return method(self, *args, **kwargs)

    return run


def _engine_work(forward: Any) -> Any:
    """verl's FSDP engine's forward-backward, first waiting what a slowed call planted (once per call)."""

    @functools.wraps(forward)
    def slowed_forward(self: Any, *args: Any, **kwargs: Any) -> Any:  # the frame a stall of a slowed call names
        work = getattr(_PLANTED, "work", None)
        if work:
            _PLANTED.work = None
            delay, hang = work
            if delay:
                time.sleep(delay)
            if hang:
                planted_hang(hang)  # --hang: a stall the telemetry catches, then it lets go
        return forward(self, *args, **kwargs)

    return slowed_forward


def _slow_workers(ew: Any) -> None:
    if not os.environ.get("VERL_OTEL_DEMO_SLOW") and not os.environ.get(HANG_ENV):
        return
    arr = ew.ActorRolloutRefWorker
    arr.compute_log_prob = _slowed(arr.__dict__["compute_log_prob"], "old_log_prob")
    arr.compute_ref_log_prob = _slowed(arr.__dict__["compute_ref_log_prob"], "ref")
    tw = ew.TrainingWorker
    is_critic = lambda w: getattr(getattr(w, "config", None), "model_type", None) == "value_model"  # noqa: E731
    tw.infer_batch = _slowed(tw.__dict__["infer_batch"], "values", is_critic)
    tw.train_mini_batch = _slowed(
        _slowed(tw.__dict__["train_mini_batch"], "update_critic", is_critic), "update_actor", lambda w: not is_critic(w)
    )


def _slow_engine(fsdp: Any) -> None:
    if os.environ.get("VERL_OTEL_DEMO_SLOW") or os.environ.get(HANG_ENV):
        fsdp.FSDPEngine.forward_backward_batch = _engine_work(fsdp.FSDPEngine.__dict__["forward_backward_batch"])


def _copying_save(fsdp_utils: Any) -> None:
    """verl's ``fsdp2_sharded_save_to_cpu`` (separate_async keeps pi_old with it) stores
    ``shard.detach().cpu()``, which on a CPU is the live parameter itself: the optimizer step would
    then rewrite the "saved" pi_old in place. Clone, as the GPU-to-CPU copy does implicitly."""
    save = fsdp_utils.fsdp2_sharded_save_to_cpu

    @functools.wraps(save)
    def copying(model: Any) -> Any:
        weights, spec = save(model)
        return {k: (t.clone(), s) for k, (t, s) in weights.items()}, spec

    fsdp_utils.fsdp2_sharded_save_to_cpu = copying


def _register_replica(_module: Any) -> None:
    from verl_otel.demo.standins import register_replica

    register_replica()


_register_rollout_adapter()
_preinit_gloo()
wrapt.register_post_import_hook(lambda m: _cpu_pools(m, "RayPPOTrainer"), "verl.trainer.ppo.ray_trainer")
wrapt.register_post_import_hook(lambda m: _cpu_pools(m, "PPOTrainer"), "verl.trainer.ppo.v1.trainer_base")
wrapt.register_post_import_hook(_fully_async_linger, "verl.experimental.fully_async_policy.fully_async_trainer")
wrapt.register_post_import_hook(_register_replica, "verl.workers.rollout.replica")
wrapt.register_post_import_hook(_slow_workers, "verl.workers.engine_workers")
wrapt.register_post_import_hook(_slow_engine, "verl.workers.engine.fsdp.transformer_impl")
wrapt.register_post_import_hook(_copying_save, "verl.utils.fsdp_utils")
