"""Every verl (and Ray) function verl-otel wraps, as data: the target ("module", "Qual.name") and our
wrapper as a ``"module:function"`` string. Nothing here imports a hook module: a wrapper's module (and
through it the trackers and the OpenTelemetry SDK) is loaded only when verl's module is imported
in the process, so an enabled process that never imports verl loads almost nothing of ours.

Adding a verl version is adding a row (``min_verl``/``max_verl``). ``how``: ``wrapt`` wraps in place;
``method`` installs a plain function calling the wrapper (Ray's actor runtime bypasses wrapt proxies,
and classes Ray pickles by value need a function pickled by reference); ``replace`` calls the string
with verl's original and installs what it returns; ``add`` puts the string's function on verl's class
as a new method (for a Ray actor: before the class is made remote).
"""

from __future__ import annotations

import threading
from dataclasses import replace

from verl_otel._log import console
from verl_otel.hooks import import_hooks, registry
from verl_otel.hooks.registry import HookTarget

_H = "verl_otel.hooks."
_AL = "verl.experimental.agent_loop.agent_loop"
_TQ = "verl.trainer.ppo.v1.agent_loop_tq"
_LEGACY = "verl.trainer.ppo.ray_trainer"
_V1 = "verl.trainer.ppo.v1.trainer_base"
_EW = "verl.workers.engine_workers"
_RL = "verl.experimental.reward_loop.reward_loop"
_FA = "verl.experimental.fully_async_policy."
_ROLLOUTER, _TRAINER, _QUEUE = _FA + "fully_async_rollouter", _FA + "fully_async_trainer", _FA + "message_queue"
# module-level @ray.remote classes, pickled by value: patched on their modified_class in the creating process
_R = "FullyAsyncRollouter.__ray_metadata__.modified_class."
_T = "FullyAsyncTrainer.__ray_metadata__.modified_class."
_ASYNC = "0.9.0"  # reset_staleness returning verl's timing dict, RolloutSample.full_batch


def _t(module: str, attr: str, wrapper: str, feature: str, min_verl: str = "0.0", how: str = "wrapt") -> HookTarget:
    return HookTarget(module, attr, _H + wrapper, feature, min_verl=min_verl, how=how)


def _m(module: str, attr: str, wrapper: str, feature: str, min_verl: str = "0.0") -> HookTarget:
    return _t(module, attr, wrapper, feature, min_verl, how="method")


def _in(process_role: str, *targets: HookTarget) -> tuple[HookTarget, ...]:
    """``targets`` run in processes of ``process_role``, one of semconv's PROCESS_ROLE_* values (written out:
    every Python start-up of the venv imports this module, which must not load semconv; tests/test_version_drift.py
    checks each is one); that process role's start-up line counts them."""
    return tuple(replace(t, process_role=process_role) for t in targets)


RAY_TARGETS: tuple[HookTarget, ...] = (
    *_in(
        "driver",
        _t("ray", "init", "ray_env:init_wrapper", "settings propagation to Ray workers"),
    ),
)

TRAINER_TARGETS: tuple[HookTarget, ...] = (
    *_in(
        "trainer",
        _t("verl.utils.profiler.performance", "_timer", "trainer:timer_wrapper", "phase spans"),
        _t(_LEGACY, "RayPPOTrainer.fit", "trainer:fit_legacy", "legacy trainer step traces"),
        _t(_LEGACY, "RayPPOTrainer._validate", "trainer:validate_wrapper", "legacy validation spans"),
        _t(_V1, "PPOTrainer.fit", "trainer:fit_v1", "v1 trainer step traces", "0.9.0"),
        _t(_V1, "PPOTrainer._validate", "trainer:validate_wrapper", "v1 validation spans", "0.9.0"),
        _m(_TRAINER, _T + "fit", "trainer:fit_fully_async", "fully_async trainer step traces", "0.8.0"),
        _m(
            _TRAINER,
            _T + "fit_step",
            "trainer:fit_step_fully_async",
            "fully_async step spans ending after validation",
            "0.8.0",
        ),
        _m(_TRAINER, _T + "_fit_validate", "trainer:fit_validate_fully_async", "fully_async validate phase", "0.8.0"),
        _t(_LEGACY, "extract_reward", "trainer:extract_reward_wrapper", "reward extra keys on the console", "0.8.0"),
        _t("verl.utils.tracking", "Tracking.log", "trainer:log_wrapper", "step ends and training curves"),
        _t(
            "verl.utils.tracking",
            "ValidationGenerationsLogger.log",
            "trainer:val_generations_wrapper",
            "validation generations on the validate span",
        ),
    ),
)

ROLLOUT_TARGETS: tuple[HookTarget, ...] = (
    *_in(
        "agent_loop_worker",
        _m(
            _AL,
            "AgentLoopWorker.generate_sequences",
            "rollout:legacy_worker_generate",
            "rollout progress (legacy)",
            "0.7.1",
        ),
        _m(_AL, "AgentLoopWorker._run_agent_loop", "rollout:run_agent_loop", "per-sample rollout progress", "0.7.1"),
        _m(_AL, "AgentLoopWorker._compute_score", "rollout:compute_score", "reward-loop spans in the trace", "0.7.1"),
    ),
    *_in(
        "trainer",
        _t(
            _AL,
            "AgentLoopManager.generate_sequences",
            "rollout:patch_legacy_manager",
            "trace context to agent-loop workers",
            "0.7.1",
            how="replace",
        ),
        _t(
            _TQ,
            "AgentLoopManagerTQ.generate_sequences",
            "rollout:tq_manager_generate",
            "trace context to v1 agent-loop workers",
            "0.9.0",
        ),
    ),
    *_in(
        "agent_loop_worker",
        _m(
            _TQ,
            "AgentLoopWorkerTQ.__ray_metadata__.modified_class.generate_sequences",
            "rollout:tq_worker_generate",
            "rollout progress (v1)",
            "0.9.0",
        ),
        _m(
            _TQ,
            "AgentLoopWorkerTQ.__ray_metadata__.modified_class._agent_loop_postprocess",
            "rollout:tq_postprocess",
            "token counts and scores of v1 sample spans",
            "0.9.0",
        ),
    ),
    *_in(
        "trainer",
        _t(
            "verl.trainer.ppo.v1.replay_buffer",
            "ReplayBuffer._materialize_batch",
            "rollout:v1_sampled",
            "token counts of v1 steps and phases",
            "0.9.0",
        ),
    ),
)

UPDATE_TARGETS: tuple[HookTarget, ...] = (
    *_in(
        "train_worker",
        _m(_EW, "TrainingWorker.train_mini_batch", "update:train_mini_batch", "actor/critic update progress", "0.8.0"),
        _m(_EW, "TrainingWorker.train_batch", "update:train_batch", "actor/critic update progress", "0.8.0"),
        _m(_EW, "TrainingWorker.infer_batch", "update:infer_batch", "critic values span", "0.8.0"),
        _m(_EW, "ActorRolloutRefWorker.update_actor", "update:update_actor", "update_actor span, peak memory", "0.8.0"),
        _m(
            _EW,
            "ActorRolloutRefWorker.compute_log_prob",
            "update:compute_log_prob",
            "old_log_prob span and peak memory",
            "0.8.0",
        ),
        _m(
            _EW,
            "ActorRolloutRefWorker.compute_ref_log_prob",
            "update:compute_ref_log_prob",
            "ref span and peak memory",
            "0.8.0",
        ),
    ),
)

WEIGHT_SYNC_TARGETS: tuple[HookTarget, ...] = (
    # written against 0.9.1's worker-side update_weights (not checked on older releases)
    *_in(
        "train_worker",
        _m(
            _EW,
            "ActorRolloutRefWorker.update_weights",
            "weight_sync:actor_update_weights",
            "weight-sync stalls and parts",
            "0.9.1",
        ),
        # the export a weight sync consumes (verl's FSDP engine; Megatron's is not timed: the sync still has its span)
        _t(
            "verl.workers.engine.fsdp.transformer_impl",
            "FSDPEngine.get_per_tensor_param",
            "weight_sync:per_tensor_param",
            "weight-sync gather and bucket times",
            "0.9.1",
        ),
    ),
    *_in(
        "replica_worker",
        _m(
            "verl.checkpoint_engine.base",
            "CheckpointEngineWorker.update_weights",
            "weight_sync:replica_update_weights",
            "weight-sync stalls and receive spans in rollout replicas",
            "0.9.1",
        ),
    ),
    # the trainer's side: tells the replica workers the step trace their next receive goes under
    *_in(
        "trainer",
        _t(
            "verl.checkpoint_engine.base",
            "CheckpointEngineManager.build_process_group",
            "weight_sync:manager_build_process_group",
            "weight-sync receive spans in rollout replicas",
            "0.9.1",
        ),
    ),
)

WORKER_GROUP_TARGETS: tuple[HookTarget, ...] = (
    *_in(
        "trainer",
        _t(
            "verl.single_controller.ray.base",
            "func_generator",
            "worker_group:func_generator",
            "worker spans in the step trace",
            "0.7.1",
        ),
    ),
)

REWARD_TARGETS: tuple[HookTarget, ...] = (
    *_in(
        "trainer",
        _t(
            _RL,
            "RewardLoopManager.compute_rm_score",
            "reward:compute_rm_score",
            "reward-model (batch) calls in the step trace",
            "0.8.0",
        ),
    ),
    *_in(
        "reward_worker",
        _m(_RL, "RewardLoopWorker.compute_score", "reward:compute_score", "reward-loop spans in the trace", "0.7.1"),
        _t(
            _RL,
            "RewardLoopWorker.verl_otel_emit_spans",
            "reward:verl_otel_emit_spans",
            "reward spans at the step's end (the last step's included)",
            "0.7.1",
            how="add",
        ),
    ),
)

ASYNC_ROLLOUT_TARGETS: tuple[HookTarget, ...] = (
    *_in(
        "rollouter",
        _m(_ROLLOUTER, _R + "fit", "async_rollout:rollouter_fit", "rollouter generation spans", _ASYNC),
        _m(
            _ROLLOUTER,
            _R + "_process_single_sample_streaming",
            "async_rollout:process_sample",
            "rollouter -> trainer step links",
            _ASYNC,
        ),
        _m(
            _ROLLOUTER,
            _R + "reset_staleness",
            "async_rollout:reset_staleness",
            "rollouter parameter-version windows",
            _ASYNC,
        ),
        _m(_ROLLOUTER, _R + "get_statistics", "async_rollout:statistics", "rollouter queue depth", _ASYNC),
        _m(
            _ROLLOUTER,
            _R + "load_checkpoint",
            "async_rollout:load_checkpoint",
            "rollouter parameter version after resume",
            _ASYNC,
        ),
        _m(_ROLLOUTER, _R + "do_validate", "async_rollout:do_validate", "rollouter validation spans", _ASYNC),
    ),
    *_in(
        "trainer",
        _m(_TRAINER, _T + "_get_samples_from_queue", "async_rollout:get_samples", "trainer idle ratio", _ASYNC),
        _m(
            _TRAINER,
            _T + "_collect_metrics_from_samples",
            "async_rollout:collect_metrics",
            "staleness gauges and step links",
            _ASYNC,
        ),
        _t(
            _TRAINER,
            "assemble_batch_from_rollout_samples",
            "async_rollout:replace_assemble",
            "step links to rollouter windows",
            _ASYNC,
            how="replace",
        ),
        _t(_QUEUE, "MessageQueueClient.get_sample", "async_rollout:queue_get", "the trainer's queue depth", _ASYNC),
        _t(_V1, "PPOTrainer._submit_batch_to_rollout", "async_rollout:submit", "v1 links to submitting steps", _ASYNC),
        _t(_V1, "PPOTrainer.step", "async_rollout:v1_step", "v1 step links to submitting steps", _ASYNC),
    ),
)

_VS = "verl.workers.rollout.vllm_rollout.vllm_async_server"
_VLLM = "vllm.v1.engine.async_llm"  # vLLM's own module (its version is checked in the wrapper)
ENGINE_TARGETS: tuple[HookTarget, ...] = (
    *_in(
        "agent_loop_worker",
        _t(
            "verl.workers.rollout.llm_server",
            "LLMServerClient.generate",
            "engine:client_generate",
            "engine request spans under the samples",
            "0.9.1",
        ),
    ),
    *_in(
        "rollout_server",
        _m(_VS, "vLLMHttpServer.run_server", "engine:run_server", "vLLM tracing and its /metrics in file_sd", "0.9.1"),
        _t(_VLLM, "init_tracer", "engine:init_tracer", "vLLM's request spans in verl-otel's export", "0.9.1"),
        _t(_VLLM, "AsyncLLM.generate", "engine:engine_generate", "engine request spans under the samples", "0.9.1"),
    ),
)

_TAL = "verl.experimental.agent_loop.tool_agent_loop"
_TOOL = "the tool's exception type on its calls"
# verl 0.9.1's ToolAgentLoop (its AgentState handlers and _call_tool's failure texts; not checked on older releases)
AGENT_TARGETS: tuple[HookTarget, ...] = _in(
    "agent_loop_worker",
    _t(_TAL, "ToolAgentLoop._handle_generating_state", "agent_loop:generating_turn", "turn spans", "0.9.1"),
    _t(_TAL, "ToolAgentLoop._handle_processing_tools_state", "agent_loop:processing_tools", "tool time", "0.9.1"),
    _t(_TAL, "ToolAgentLoop._call_tool", "agent_loop:call_tool", "tool-call spans, outcomes and metrics", "0.9.1"),
    _t("verl.tools.function_tool", "FunctionTool.call", "agent_loop:tool_method", _TOOL, "0.9.1"),
    _t("verl.tools.base_tool", "BaseTool.create", "agent_loop:tool_method", _TOOL, "0.9.1"),
    _t("verl.tools.base_tool", "BaseTool.execute", "agent_loop:tool_method", _TOOL, "0.9.1"),
    _t("verl.tools.base_tool", "BaseTool.release", "agent_loop:tool_method", _TOOL, "0.9.1"),
)

ALL_TARGETS: tuple[HookTarget, ...] = (
    *TRAINER_TARGETS,
    *ROLLOUT_TARGETS,
    *UPDATE_TARGETS,
    *WEIGHT_SYNC_TARGETS,
    *WORKER_GROUP_TARGETS,
    *REWARD_TARGETS,
    *ASYNC_ROLLOUT_TARGETS,
    *ENGINE_TARGETS,
    *AGENT_TARGETS,
)

_lock = threading.Lock()
_all_installed = False  # install_all ran (registry._originals holds what is hooked now)


def install_all() -> None:
    """Register every target (idempotent): the start-up hook, ``instrument()`` and the instrumentor."""
    global _all_installed
    with _lock:
        if _all_installed:
            return
        _all_installed = True
    console()  # verl-otel starts working here: its own lines, unless the application configured our logger
    registry.install((*RAY_TARGETS, *ALL_TARGETS))
    # the start-up line of each process role the runtime wires; attached when a hook module first imports the runtime
    # (the runtime never imports the hooks, and a process that never imports verl loads no runtime)
    import_hooks.register("verl_otel.runtime", lambda module: module.on_process_role(_start_up_line))


def _start_up_line(process_role: str) -> None:
    from verl_otel.hooks import coverage  # here: start-up loads no more than it must

    coverage.report(process_role)


def uninstall_all() -> None:
    """Restore every wrapped function exactly."""
    global _all_installed
    registry.uninstall((*RAY_TARGETS, *ALL_TARGETS, *registry.registered()))  # with those added on first use
    from verl_otel.process.ends import WATCH

    WATCH.uninstall()  # the signal watch's listeners, and the wakeup fd that was there before
    with _lock:
        _all_installed = False
