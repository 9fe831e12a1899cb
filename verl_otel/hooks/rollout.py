"""Agent-loop hooks: rollout progress per worker and the trainer's trace context into the batch.

Trainer side: the manager's ``generate_sequences`` puts the current span's traceparent into the
batch (legacy: ``meta_info``; v1: a TensorDict entry; fully_async's rollouter: its validation span,
and each training sample's window, see hooks/async_rollout.py). Worker side: ``generate_sequences`` opens the
worker's batch (expected samples, mode, step, parent) and ``run_agent_loop`` (one call per sample,
legacy and v1) counts it in and out.

v1's ``AgentLoopWorkerTQ`` is a module-level ``@ray.remote`` class, pickled by value: its own
``generate_sequences`` is patched on the Ray class' ``modified_class`` in the process that creates
the actors, with a plain (picklable) function.
"""

from __future__ import annotations

import contextvars
import functools
import re
from collections.abc import Callable, Coroutine
from typing import Any

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel.hooks._safe import safe
from verl_otel.hooks.goodput import watch_occupancy
from verl_otel.hooks.stall_watch import answered, sent, unwatch, watch
from verl_otel.hooks.verl_objects import (
    meta_step,
    rollout_n,
    run_names,
    sample_attributes,
    sample_validates,
    tensordict_step,
    with_session,
)
from verl_otel.progress.total import TotalBar
from verl_otel.telemetry.agent import AgentSample
from verl_otel.telemetry.rollout import RolloutTracker


def _rollout_worker_index() -> int | None:
    """Agent-loop actors are named ``agent_loop_worker_{i}_{uuid}`` by verl's manager."""
    try:
        import ray

        name = ray.get_runtime_context().get_actor_name() or ""
    except Exception:  # noqa: BLE001
        return None
    m = re.search(r"agent_loop_worker_(\d+)", name)
    return int(m.group(1)) if m else None


def _wire(worker: Any = None) -> None:
    """First batch in this process: an agent-loop worker (the trackers' row: gauges, sample spans, the bar)."""
    m = trackers.current()
    if m.wired(sc.PROCESS_ROLE_AGENT_LOOP):
        return
    m.rollout.worker = _rollout_worker_index()
    m.wire(
        sc.PROCESS_ROLE_AGENT_LOOP,
        index=m.rollout.worker,
        describe=sample_attributes,
        **run_names(worker),
    )


def _tracker() -> RolloutTracker:
    return trackers.current().rollout


def _mode(validate: Any) -> str:
    return sc.MODE_VALIDATE if bool(validate) else sc.MODE_TRAIN


def _current_traceparent() -> str | None:
    """The trainer's open span; in fully_async's rollouter (no trainer there), its open validation."""
    from verl_otel.telemetry.propagation import inject

    m = trackers.current()
    return inject(m.steps.current_context() or m.windows.validate_context())


# -- trainer side ------------------------------------------------------------------------------
RPC_TIMEOUT_S = 10.0  # the total bar's ask of the agent-loop workers


def worker_counts(actor: Any, mode: str) -> tuple[int, int]:
    """In an agent-loop worker (through Ray's ``__ray_call__``): (step, finished samples) of its rollout of ``mode``."""
    batch = _tracker().snapshot(mode)
    return (-1, 0) if batch is None else (batch.step, batch.completed)


class RayTotalBar(TotalBar):
    """The manager's [VERL_PROGRESS] bar, asking each agent-loop worker actor for its counts."""

    def ask(self, workers: Any, mode: str) -> list[tuple[int, int]]:
        import ray

        return list(ray.get([w.__ray_call__.remote(worker_counts, mode) for w in workers], timeout=RPC_TIMEOUT_S))

    def late(self, exc: BaseException) -> bool:
        return type(exc).__name__ == "GetTimeoutError"  # busy workers (their first call, a loaded machine)


def _send(manager: Any, blocking: bool) -> int | None:
    workers = getattr(manager, "agent_loop_workers", None)
    return sent(sc.PROCESS_ROLE_AGENT_LOOP, "generate_sequences", len(workers) if workers else None, blocking)


def _dispatched(
    manager: Any, mode: str, step: int, prompts: int, samples: int, shape: tuple[int, ...], meta_keys: list[Any]
) -> None:
    """A dispatch in the fit() process, for the [VERL_PROGRESS] rollout start details and the total bar."""
    m = trackers.current()
    if not m.steps.active:  # fully_async's rollouter dispatches sample by sample: no bar
        return
    if mode == sc.MODE_TRAIN:
        watch_occupancy(m, manager)  # the goodput split's rollout occupancy, asked of these workers
    progress = m.progress
    if mode == sc.MODE_TRAIN:
        progress.rollout_dispatched(step, prompts, samples, shape, meta_keys)
    bar = progress.total_bar(RayTotalBar)
    if bar is not None:
        bar.dispatched(list(getattr(manager, "agent_loop_workers", None) or ()), mode, step, samples)


def _returned(mode: str, step: int) -> None:
    bar = trackers.current().progress.total
    if bar is not None:
        bar.returned(mode, step)


def _on_legacy_dispatch(manager: Any, prompts: Any) -> tuple[str, int]:
    tp = _current_traceparent()
    meta = getattr(prompts, "meta_info", None)
    if tp and isinstance(meta, dict):
        meta[sc.TRACEPARENT_KEY] = tp
    windows = trackers.current().windows
    if windows.active and isinstance(meta, dict):  # fully_async rollouter: lines by version
        meta[sc.PARAM_VERSION_KEY] = windows.version
    meta = meta if isinstance(meta, dict) else {}
    validate, step = meta_step(meta)
    rows = len(prompts)
    n = rollout_n(manager, validate)  # verl's legacy trainer repeats each prompt n times before the call
    ids = prompts.batch["input_ids"] if prompts.batch is not None and "input_ids" in prompts.batch.keys() else None
    shape = tuple(ids.shape) if ids is not None else (rows,)
    _dispatched(manager, _mode(validate), step, rows // max(1, n), rows, shape, list(meta))
    return _mode(validate), step


def count_tokens(out: Any) -> None:
    """A generated training batch's tokens (a DataProto: the legacy manager's output, fully_async's assembled
    batch), for the step and its phases (telemetry/step_tokens.py)."""
    from verl_otel.hooks.verl_batches import token_counts

    counts = token_counts(out)
    steps = trackers.current().steps
    if counts is not None and steps.active:
        steps.tokens_seen(*counts)


def v1_sampled(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """v1's ``ReplayBuffer._materialize_batch(partition_id, ...)``, the training batch taken in the gen phase (by the
    sync and the async replay buffers alike): its tokens, as the legacy manager's output counts them."""
    batch = wrapped(*args, **kwargs)
    partition = args[0] if args else kwargs.get("partition_id")
    if partition == "train":
        safe(_count_sampled_tokens, batch)
    return batch


def _count_sampled_tokens(batch: Any) -> None:
    from verl_otel.hooks.verl_objects import sampled_tokens

    counts = sampled_tokens(getattr(batch, "tags", None) or ())
    steps = trackers.current().steps
    if counts is not None and steps.active:  # each of a step's parameter_sync_step mini-batches is trained alone
        steps.tokens_seen(*counts, separate=True)


def patch_legacy_manager(original: Callable[..., Any]) -> Callable[..., Any] | None:
    """``AgentLoopManager.generate_sequences`` is ``@auto_await``, which inspects its caller's frame:
    wrap the coroutine function underneath and apply ``auto_await`` again on top."""
    inner = getattr(original, "__wrapped__", None)
    if inner is None:
        return None
    from verl.utils.ray_utils import auto_await

    @functools.wraps(inner)
    async def generate_sequences(self: Any, prompts: Any, *args: Any, **kwargs: Any) -> Any:
        dispatch = safe(_on_legacy_dispatch, self, prompts)
        told = safe(_send, self, True)  # the trainer's rollout or validation now waits on the agent-loop workers
        try:
            out = await inner(self, prompts, *args, **kwargs)
        finally:
            safe(answered, told)
        if dispatch is not None:
            safe(_returned, *dispatch)
            if dispatch[0] == sc.MODE_TRAIN:
                safe(count_tokens, out)
        return out

    return auto_await(generate_sequences)


def tq_manager_generate(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    prompts: Any = args[0] if args else kwargs.get("prompts")
    tp = safe(_current_traceparent)
    if tp is not None and hasattr(prompts, "set_non_tensor"):
        safe(prompts.set_non_tensor, sc.TRACEPARENT_KEY, tp)
    safe(_on_tq_dispatch, instance, prompts)
    safe(_send, instance, False)  # v1: the samples go on after the dispatch returns (told, never answered)
    return wrapped(*args, **kwargs)


def _on_tq_dispatch(manager: Any, batch: Any) -> None:
    """v1: a TensorDict of prompts (each runs n sessions in the worker); its non-tensor entries are the meta."""
    from tensordict import NonTensorData

    keys = list(batch.keys())
    validate, step = tensordict_step(batch)
    rows = len(batch)
    ids: Any = batch["input_ids"] if "input_ids" in keys else None
    shape = tuple(ids.shape) if hasattr(ids, "shape") else (rows,)
    meta = [k for k in keys if isinstance(batch.get(k), NonTensorData)]
    _dispatched(manager, _mode(validate), step, rows, rows * rollout_n(manager, validate), shape, meta)


# -- worker side -------------------------------------------------------------------------------
def _on_legacy_batch(worker: Any, batch: Any) -> str:
    _wire(worker)
    meta = getattr(batch, "meta_info", None) or {}
    validate, step = meta_step(meta)
    mode = _mode(validate)
    version = meta.get(sc.PARAM_VERSION_KEY)
    _tracker().batch_started(
        mode,
        step,
        len(batch),
        meta.get(sc.TRACEPARENT_KEY),
        None if version is None else int(version),
    )
    return mode


async def _finish_after(coro: Coroutine[Any, Any, Any], mode: str | None) -> Any:
    try:
        return await coro
    finally:
        if mode is not None:
            safe(lambda: _tracker().finish(mode))


def legacy_worker_generate(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    batch = args[0] if args else kwargs.get("batch")
    mode = safe(_on_legacy_batch, instance, batch)
    return _finish_after(wrapped(*args, **kwargs), mode)


class _SampleCtx:
    """What one sample's asyncio task carries: its trainer context (for the reward loop) and, in
    v1, whose run_agent_loop returns nothing (the output goes into TransferQueue), the output
    that the _agent_loop_postprocess hook sees (the last one: what verl was filling in)."""

    __slots__ = ("agent", "engine", "finish", "output", "parent", "trajectory")

    def __init__(self, parent: str | None, trajectory: dict[str, Any] | None = None) -> None:
        self.output: Any = None
        self.parent = parent
        self.trajectory = trajectory  # verl's (held by verl anyway): the sample's index for a tool's stall
        self.engine: tuple[str, int] | None = None  # (traceparent, span id) for its engine requests, made once
        self.agent: AgentSample | None = None  # a tool agent loop's turns and tool calls (hooks/agent_loop.py)
        self.finish: str | None = None  # in a tool turn: its generate call's stop reason (hooks/agent_loop.py)


_SAMPLE: contextvars.ContextVar[_SampleCtx | None] = contextvars.ContextVar("verl_otel_sample", default=None)


def engine_traceparent() -> str | None:
    """The running sample's context for its inference-engine requests (hooks/engine.py); None outside a
    sample or in a trace that is not sampled."""
    ctx = _SAMPLE.get()
    if ctx is None:
        return None
    if ctx.engine is None:
        from verl_otel.telemetry.engine_context import sample_context

        ctx.engine = sample_context(ctx.parent) or ("", 0)
    return ctx.engine[0] or None


def current_sample() -> _SampleCtx | None:
    """The running sample's context (hooks/agent_loop.py records its turns and tool calls on it)."""
    return _SAMPLE.get()


def _batch_parent(mode: str) -> str | None:
    batch = _tracker().snapshot(mode)
    return batch.parent if batch is not None else None


async def _timed_sample(coro: Coroutine[Any, Any, Any], mode: str, token: int, trajectory: dict[str, Any]) -> Any:
    # every sample of a batch is in flight at once, and each object one holds alive is one more for every full
    # garbage collection to walk: a try, not two on_exit context managers; the previous value, not a reset Token
    ctx = _SampleCtx(safe(_batch_parent, mode), trajectory)
    previous = _SAMPLE.get()
    _SAMPLE.set(ctx)
    stall_token = safe(watch, sc.CALL_AGENT_SAMPLE, ctx.parent)
    err: BaseException | None = None
    try:
        out = await coro
        if out is not None:  # v1's run_agent_loop returns nothing: its output is what tq_postprocess saw
            ctx.output = out
        return out
    except BaseException as exc:
        err = None if isinstance(exc, GeneratorExit) else exc  # closed early: not a failure of the sample
        raise
    finally:
        safe(unwatch, stall_token)
        safe(_sample_done, ctx, previous, mode, token, trajectory, err)
        err = None  # no cycle through the raised exception's traceback to this frame


def _sample_done(
    ctx: _SampleCtx,
    previous: _SampleCtx | None,
    mode: str,
    token: int,
    trajectory: dict[str, Any],
    err: BaseException | None,
) -> None:
    if _SAMPLE.get() is ctx:  # not when closed from another task's context (a dropped coroutine collected there)
        _SAMPLE.set(previous)
    if ctx.engine is not None and ctx.engine[1]:  # its span, if it gets one, takes the id its requests named
        trajectory = {**trajectory, sc.SAMPLE_SPAN_ID_KEY: ctx.engine[1]}
    agent = ctx.agent
    if agent is not None:  # its turns and tool calls, for its span
        trajectory = {**trajectory, sc.SAMPLE_AGENT_KEY: agent}
    # the call's result, or (when it raised) the last object verl was filling in
    seconds = _tracker().sample_finished(mode, token, trajectory, ctx.output, err)
    if agent is not None and seconds is not None:
        trackers.current().agent_tools.sample_done(mode, agent, seconds)


def tq_postprocess(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    output = args[0] if args else kwargs.get("output")
    ctx = _SAMPLE.get()
    if ctx is not None and output is not None:  # the object verl fills in (reward score) as it goes on
        ctx.output = output[-1] if isinstance(output, list) and output else output
    return wrapped(*args, **kwargs)


def compute_score(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The sample's kwargs become the reward call's non-tensor batch: a copy of them carries the
    trainer's context to the reward-loop worker (verl's own kwargs, stored with the sample, stay
    as they were)."""
    ctx = _SAMPLE.get()
    if ctx is None or not ctx.parent:
        return wrapped(*args, **kwargs)
    if len(args) > 1 and isinstance(args[1], dict):
        args = (args[0], {**args[1], sc.TRACEPARENT_KEY: ctx.parent}, *args[2:])
    elif isinstance(kwargs.get("kwargs"), dict):
        kwargs = {**kwargs, "kwargs": {**kwargs["kwargs"], sc.TRACEPARENT_KEY: ctx.parent}}
    return wrapped(*args, **kwargs)


def run_agent_loop(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    trajectory = args[1] if len(args) > 1 else kwargs.get("trajectory")
    if not isinstance(trajectory, dict):
        return wrapped(*args, **kwargs)
    mode = _mode(sample_validates(trajectory))
    token = _tracker().sample_started(mode)
    coro = wrapped(*args, **kwargs)
    if isinstance(kwargs.get("session_id"), int):  # v1 shares one trajectory dict among the n sessions
        trajectory = with_session(trajectory, kwargs["session_id"])
    return _timed_sample(coro, mode, token, trajectory)


def _on_tq_batch(instance: Any, batch: Any) -> None:
    from verl_otel.hooks.verl_batches import nontensor

    _wire(instance)
    tp = None
    if sc.TRACEPARENT_KEY in batch.keys():
        tp = nontensor(batch.pop(sc.TRACEPARENT_KEY))
    validate, step = tensordict_step(batch)
    _tracker().batch_started(_mode(validate), step, len(batch) * rollout_n(instance, validate), tp)


def tq_worker_generate(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    batch = args[0] if args else kwargs.get("batch")
    safe(_on_tq_batch, instance, batch)
    return wrapped(*args, **kwargs)
