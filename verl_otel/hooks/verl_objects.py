"""verl's objects, read into the plain values the trackers take. Every attribute name and
dict key of verl's that the hooks read lives here (or in the hook that reads it once); the trackers in
telemetry/ never touch a verl object. Each reader tolerates other verl versions: a missing field
reads as None, never an exception."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from verl_otel import semconv as sc
from verl_otel.hooks.registry import verl_version
from verl_otel.telemetry.goodput import Pool, pools_of
from verl_otel.telemetry.steps import RunInfo
from verl_otel.telemetry.values import to_scalar

#: verl's keys, read off the dicts it returns (the async trainers': verl_async_objects.py)
#: a rollout batch's (the legacy DataProto's meta_info, the v1 TensorDict's non-tensor entries); global_steps is
#: also the trainer's (and rollouter's) attribute
VALIDATE_KEY, GLOBAL_STEPS_KEY = "validate", "global_steps"
ROLLOUT_N_KEY = "rollout_n"  # an agent-loop trajectory's: the sample's session (its index among the prompt's n)


# -- numbers ----------------------------------------------------------------------------------------
def as_int(value: Any) -> int | None:
    """An integer from verl's tags (int, numpy or 0-d tensor), else None."""
    try:
        return operator.index(value)
    except TypeError:
        return None


def as_float(obj: Any, name: str) -> float | None:
    """``obj.<name>`` as a float; None when absent or not a number."""
    try:
        value = getattr(obj, name)
        return None if value is None else float(value)
    except (AttributeError, TypeError, ValueError):
        return None


# -- config -----------------------------------------------------------------------------------------
def config_value(config: Any, path: str, default: Any = None) -> Any:
    """``config.a.b.c`` for ``path="a.b.c"`` through mappings or attributes; ``default`` when missing."""
    node = config
    for part in path.split("."):
        try:
            node = node[part] if isinstance(node, Mapping) or hasattr(node, "__getitem__") else getattr(node, part)
        except Exception:  # noqa: BLE001 - missing keys in other verl versions
            try:
                node = getattr(node, part)
            except Exception:  # noqa: BLE001 - nor as an attribute
                return default
        if node is None:
            return default
    return node


def run_names(obj: Any) -> dict[str, Any]:
    """``project``/``experiment`` of the run ``obj`` belongs to (``obj.config.trainer``), as
    :meth:`verl_otel.runtime.Runtime.wire` takes them; None where verl's config does not say."""
    trainer_cfg = getattr(getattr(obj, "config", None), "trainer", None)
    get = getattr(trainer_cfg, "get", None)
    if get is None:
        return {"project": None, "experiment": None}
    return {"project": get("project_name"), "experiment": get("experiment_name")}


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def run_info(trainer: Any, kind: str) -> RunInfo:
    """What the step tracer knows of a run, from verl's trainer object and its config."""
    config = getattr(trainer, "config", None)
    planned = _int(getattr(trainer, "total_training_steps", None)) or _int(
        config_value(config, "trainer.total_training_steps")
    )
    mode = config_value(config, "trainer.v1.trainer_mode") if kind == sc.TRAINER_V1 else None
    return RunInfo(
        trainer=kind,
        project=str(config_value(config, "trainer.project_name", "")),
        experiment=str(config_value(config, "trainer.experiment_name", "")),
        steps_planned=planned,
        rollout_n=_int(config_value(config, "actor_rollout_ref.rollout.n")),
        batch_size=_int(config_value(config, "data.train_batch_size")),
        mode=None if mode is None else str(mode),
        verl_version=verl_version(),
        pools=tuple(pools(config, kind)),
    )


def _gpus(config: Any, prefix: str) -> int | None:
    nodes, per_node = (
        _int(config_value(config, f"{prefix}.nnodes")),
        _int(config_value(config, f"{prefix}.n_gpus_per_node")),
    )
    return nodes * per_node if nodes and per_node and nodes > 0 and per_node > 0 else None


def rollout_gpus(rollouter: Any) -> int | None:
    """fully_async's rollouter: its standalone pool's GPUs (``rollout.nnodes x n_gpus_per_node``)."""
    return _gpus(getattr(rollouter, "config", None), "rollout")


def pools(config: Any, kind: str) -> list[Pool]:
    """The resource pools the trainer accounts for goodput: the training pool (``trainer.nnodes x
    n_gpus_per_node``; on the CPU demo the configured devices, one process each), and a standalone rollout pool
    (``actor_rollout_ref.rollout.nnodes x n_gpus_per_node``, separate_async) beside it; fully_async's trainer
    has only its own (the rollouter's pool, ``rollout.*``, is not this process')."""
    train = _gpus(config, "trainer")
    if kind == sc.TRAINER_FULLY_ASYNC:
        return pools_of(train, None, trainer_only=True)
    return pools_of(train, _gpus(config, "actor_rollout_ref.rollout"))


def global_step(trainer: Any) -> int:
    """The trainer's ``global_steps`` now (-1 when it has none)."""
    value = _int(getattr(trainer, GLOBAL_STEPS_KEY, -1))
    return -1 if value is None else value


def global_step_reader(trainer: Any) -> Callable[[], int]:
    """Reads the trainer's ``global_steps`` when called (-1 when it has none)."""
    return lambda: global_step(trainer)


# -- rollout batches -------------------------------------------------------------------------------


def meta_step(meta: Mapping[str, Any]) -> tuple[bool, int]:
    """(validating?, the trainer's global step) of a legacy rollout batch, from its ``meta_info``; (False, -1)
    for what is absent."""
    return bool(meta.get(VALIDATE_KEY, False)), int(meta.get(GLOBAL_STEPS_KEY, -1))


def tensordict_step(batch: Any) -> tuple[bool, int]:
    """The same of a v1 rollout batch (a TensorDict), from its non-tensor entries."""
    from verl_otel.hooks.verl_batches import nontensor

    keys = batch.keys()
    validate = bool(nontensor(batch[VALIDATE_KEY])) if VALIDATE_KEY in keys else False
    return validate, int(nontensor(batch[GLOBAL_STEPS_KEY])) if GLOBAL_STEPS_KEY in keys else -1


def worker_batch_step(data: Any) -> int | None:
    """The trainer's step a training worker's batch (a TensorDict) carries, when verl put it there."""
    from verl.utils import tensordict_utils as tu

    step = tu.get(data, GLOBAL_STEPS_KEY, None)
    return None if step is None else int(step)


def weight_sync_step(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    """The step of a worker's ``update_weights(global_steps, ...)`` call (-1 when not an int)."""
    step = kwargs.get(GLOBAL_STEPS_KEY, args[0] if args else None)
    return step if isinstance(step, int) else -1


def sampled_tokens(tags: Sequence[Any]) -> tuple[int, int] | None:
    """(prompt, response) tokens of the batch v1's replay buffer sampled, from the TransferQueue tags verl put with
    each sample (``prompt_len``, ``response_len``), padding left out; None when no tag says."""
    prompt = response = counted = 0
    for tag in tags:
        if isinstance(tag, Mapping) and not tag.get("is_padding", False):
            p, r = as_int(tag.get("prompt_len")), as_int(tag.get("response_len"))
            if p is not None and r is not None:
                prompt, response, counted = prompt + p, response + r, counted + 1
    return (prompt, response) if counted else None


def rollout_n(owner: Any, validate: bool) -> int:
    """Samples per prompt: verl's ``rollout.n`` (``rollout.val_kwargs.n`` when validating), from the config of
    ``owner`` (an agent-loop manager or worker)."""
    rollout = owner.config.actor_rollout_ref.rollout
    return int(rollout.val_kwargs.n if validate else rollout.n)


def sample_validates(trajectory: Mapping[str, Any]) -> bool:
    """Whether an agent-loop sample's trajectory is a validation sample's."""
    return bool(trajectory.get(VALIDATE_KEY))


def with_session(trajectory: Mapping[str, Any], session_id: int) -> dict[str, Any]:
    """v1 shares one trajectory dict among a prompt's n sessions: a copy naming this one's (as the legacy's)."""
    return {**trajectory, ROLLOUT_N_KEY: session_id}


# -- agent-loop samples -----------------------------------------------------------------------------
def reward_workers(trainer: Any) -> list[Any]:
    """The reward-loop worker actor handles of a legacy or v1 trainer (``reward_loop_manager``), or none."""
    workers = getattr(getattr(trainer, "reward_loop_manager", None), "reward_loop_workers", None)
    return list(workers) if isinstance(workers, (list, tuple)) else []


_WORKER_GROUPS = ("actor_rollout_wg", "actor_wg", "critic_wg", "ref_policy_wg", "rm_wg")  # actor_wg: fully_async's
_AGENT_LOOP_MANAGERS = ("async_rollout_manager", "agent_loop_manager")  # legacy; v1 (set in fit())


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def worker_processes(trainer: Any) -> list[Any]:
    """The actor handles of a trainer's (or fully_async's rollouter's) worker processes, each once: its worker
    groups' workers, the agent-loop workers, the rollout replicas' servers and workers (reward-loop workers have
    their own fit-end flush: :func:`reward_workers`)."""
    handles: list[Any] = []
    for name in _WORKER_GROUPS:
        handles += _list(getattr(getattr(trainer, name, None), "workers", None))
    for name in _AGENT_LOOP_MANAGERS:
        handles += _list(getattr(getattr(trainer, name, None), "agent_loop_workers", None))
    for replica in _list(getattr(getattr(trainer, "llm_server_manager", None), "rollout_replicas", None)):
        handles += _list(getattr(replica, "servers", None)) + _list(getattr(replica, "workers", None))
    return _unique(handles)


def _unique(handles: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    unique = []
    for handle in handles:
        key = getattr(handle, "_actor_id", None) or id(handle)  # colocated groups share their actors
        if key not in seen:
            seen.add(key)
            unique.append(handle)
    return unique


#: a GPU phase -> the trainer's worker groups that may run it, the first present (ref: in the actor's when no own)
_PHASE_GROUPS: dict[str, tuple[str, ...]] = {
    sc.PHASE_OLD_LOG_PROB: ("actor_rollout_wg", "actor_wg"),
    sc.PHASE_UPDATE_ACTOR: ("actor_rollout_wg", "actor_wg"),
    sc.PHASE_REF: ("ref_policy_wg", "actor_rollout_wg", "actor_wg"),
    sc.PHASE_VALUES: ("critic_wg",),
    sc.PHASE_UPDATE_CRITIC: ("critic_wg",),
}


def gpu_processes(trainer: Any, phase: str) -> list[Any]:
    """The actor handles of the processes whose GPUs ran ``phase`` of ``trainer``: a training phase's worker group,
    or, for the rollout, every rollout replica's servers and workers (in verl's hybrid engine its workers are the
    actor's training workers, which hold the GPUs)."""
    if phase == sc.PHASE_ROLLOUT:
        handles: list[Any] = []
        for replica in _list(getattr(getattr(trainer, "llm_server_manager", None), "rollout_replicas", None)):
            handles += _list(getattr(replica, "servers", None)) + _list(getattr(replica, "workers", None))
        return _unique(handles)
    for name in _PHASE_GROUPS.get(phase, ()):
        workers = _list(getattr(getattr(trainer, name, None), "workers", None))
        if workers:
            return workers
    return []


def _tokens(output: Any) -> tuple[int | None, int | None]:
    """(prompt, response) token counts of verl's padded per-sample output."""
    try:
        mask = output.attention_mask
        plen = output.prompt_ids.shape[-1]
        return int(mask[..., :plen].sum()), int(mask[..., plen:].sum())
    except Exception:  # noqa: BLE001 - other verl versions, other shapes
        try:
            return len(output.prompt_ids), len(output.response_ids)
        except Exception:  # noqa: BLE001 - no token fields at all
            return None, None


def sample_attributes(trajectory: Mapping[str, Any] | None, output: Any) -> dict[str, Any]:
    """``rollout.sample`` attributes of one agent-loop sample: verl's trajectory dict (step, index, n)
    and its per-sample output (tokens, turns, tool calls, score, vLLM/SGLang timings)."""
    traj = trajectory or {}
    attrs: dict[str, Any] = {}
    for key, attr in (
        ("step", sc.ATTR_GLOBAL_STEP),
        ("sample_index", sc.ATTR_SAMPLE_INDEX),
        (ROLLOUT_N_KEY, sc.ATTR_SAMPLE_ROLLOUT_N),
    ):
        if traj.get(key) is not None:
            value = _int(traj[key])
            if value is not None:
                attrs[attr] = value
    if output is None:
        return attrs
    prompt, response = _tokens(output)
    if prompt is not None:
        attrs[sc.ATTR_SAMPLE_PROMPT_TOKENS] = prompt
    if response is not None:
        attrs[sc.ATTR_SAMPLE_RESPONSE_TOKENS] = response
    turns = getattr(output, "num_turns", None)
    if isinstance(turns, int):
        attrs[sc.ATTR_SAMPLE_TURNS] = turns
    extra = getattr(output, "extra_fields", None) or {}
    for key in ("num_tool_calls", "tool_calls"):
        if isinstance(extra.get(key), int):
            attrs[sc.ATTR_SAMPLE_TOOL_CALLS] = extra[key]
            break
    # the weights versions that began and finished it (v1's async trainers: a request a weight sync aborted is
    # resumed on the new weights, a partial rollout)
    for key, attr in (("min_global_steps", sc.ATTR_PARAM_VERSION), ("max_global_steps", sc.ATTR_PARAM_VERSION_END)):
        if (version := _int(extra.get(key))) is not None:
            attrs[attr] = version
    score, _ = to_scalar(getattr(output, "reward_score", None))
    if score is not None:
        attrs[sc.ATTR_SAMPLE_SCORE] = score
    metrics = getattr(output, "metrics", None)
    for field, attr in sc.SAMPLE_TIMING_ATTRS.items():
        val, _ = to_scalar(getattr(metrics, field, None) if metrics is not None else None)
        if val is not None and val >= 0:
            attrs[attr] = int(val) if field == "num_preempted" else val
    return attrs


# -- reward loop ------------------------------------------------------------------------------------
def _first(non_tensor: Mapping[str, Any], key: str) -> Any:
    values = non_tensor.get(key)
    try:
        return values[0] if values is not None and len(values) else None
    except TypeError:
        return None


def reward_call_attributes(data: Any, result: Any) -> dict[str, Any]:
    """``reward.compute_score`` attributes of one reward-loop call: its sample's data source, step and
    index (the call's non-tensor batch) and the score verl's reward manager returned."""
    non_tensor = getattr(data, "non_tensor_batch", None) or {}
    attrs: dict[str, Any] = {}
    source = _first(non_tensor, "data_source")
    if source is not None:
        attrs[sc.ATTR_REWARD_DATA_SOURCE] = str(source)[:256]
    for key, attr in ((GLOBAL_STEPS_KEY, sc.ATTR_GLOBAL_STEP), ("index", sc.ATTR_SAMPLE_INDEX)):
        value, _ = to_scalar(_first(non_tensor, key))
        if value is not None:
            attrs[attr] = int(value)
    score, _ = to_scalar(result.get("reward_score") if isinstance(result, dict) else None)
    if score is not None:
        attrs[sc.ATTR_SAMPLE_SCORE] = score
    return attrs


# -- the rollout engine (verl's LLM server client and vLLM server) -----------------------------------
def rollout_engine(client: Any) -> str | None:
    """``actor_rollout_ref.rollout.name`` of the run an ``LLMServerClient`` belongs to ("vllm", "sglang")."""
    name = config_value(getattr(client, "config", None), "actor_rollout_ref.rollout.name")
    return None if name is None else str(name)


def rollout_server(server: Any) -> tuple[int | None, int | None, str | None, int | None]:
    """(replica rank, node rank, address, port) of verl's vLLM server actor; the address once it serves."""
    host, port = getattr(server, "_server_address", None), getattr(server, "_server_port", None)
    return (
        _int(getattr(server, "replica_rank", None)),
        _int(getattr(server, "node_rank", None)),
        str(host) if host else None,
        port if isinstance(port, int) else None,
    )
