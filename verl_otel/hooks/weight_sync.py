"""Weight syncs in the processes that do them: the actor worker's side (``ActorRolloutRefWorker.update_weights``:
export, then send through the checkpoint engine or load into its colocated engine) and a rollout replica's side
(``CheckpointEngineWorker.update_weights``: receive and load). Both are watched for stalls; their parts (the
actor's gather, transfer, buckets; the replica's receive, load, buckets: telemetry/weight_sync_parts.py) go under the
trainer's ``update_weights`` phase span.

verl's update_weights call carries no trace context: the actor worker remembers the step trace of the last traced
call it ran (update_actor, compute_log_prob ...: :func:`remember_trace`), and the trainer gives its phase span an
id derivable from that trace (telemetry/propagation.py::phase_span_id). A replica worker runs no traced call (and
is not the process that serves the step's requests): the trainer's ``CheckpointEngineManager.build_process_group``
tells it the step trace first (:func:`manager_build_process_group`, a Ray ``__ray_call__``). Without a trace of the
sync's step (the sync before the first step) only the stall watch runs. The actor's export is timed where verl's
model engine makes it (``FSDPEngine.get_per_tensor_param``, :func:`per_tensor_param`), the replica's receive
where verl asks its checkpoint engine for it (``receive_weights``), both found through a context variable."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel.hooks._safe import on_exit, safe
from verl_otel.hooks.stall_watch import unwatch
from verl_otel.hooks.verl_objects import weight_sync_step

#: the sync the running update_weights coroutine is in (its task's context: concurrent syncs do not mix)
_SYNC: contextvars.ContextVar[Any] = contextvars.ContextVar("verl_otel_weight_sync", default=None)


def remember_trace(worker: Any, traceparent: str | None, step: int) -> None:
    """A traced call of ``worker`` (its batch carried the step's context): its next weight sync is of that step."""
    if traceparent:
        setattr(worker, sc.WORKER_STEP_TRACE_ATTR, (traceparent, step))


def _parent(worker: Any, step: int) -> Any:
    from verl_otel.telemetry.propagation import phase_context

    seen = getattr(worker, sc.WORKER_STEP_TRACE_ATTR, None)
    if step < 0 or not isinstance(seen, tuple) or len(seen) != 2:
        return None  # a sync outside a step's update_weights phase (verl passes no step: a colocated reward)
    traceparent, seen_step = seen
    if isinstance(seen_step, int) and seen_step >= 0 and seen_step != step:
        return None  # no traced call in this step yet: an earlier step's trace is not this sync's
    return phase_context(traceparent, sc.PHASE_UPDATE_WEIGHTS)


def _begin(worker: Any, step: int, mode: Any, replica: bool) -> Any:
    from verl_otel.hooks.verl_objects import config_value
    from verl_otel.telemetry.weight_sync_parts import WeightReceive, WeightSync

    parent = _parent(worker, step)
    if parent is None:
        return None
    # the actor worker's config holds the rollout's; a replica's CheckpointEngineWorker holds the rollout's own
    config, prefix = (
        (getattr(worker, "rollout_config", None), "") if replica else (getattr(worker, "config", None), "rollout.")
    )
    if mode in (None, "auto"):
        mode = config_value(config, prefix + "checkpoint_engine.backend", "?")
    megabytes = config_value(config, prefix + "checkpoint_engine.update_weights_bucket_megabytes", 512)
    if replica:
        _time_receive(getattr(worker, "checkpoint_engine", None))
    svc = trackers.current().services
    cls = WeightReceive if replica else WeightSync
    return cls(svc.tracer(), parent, str(mode), int(megabytes) << 20, step, svc.settings.max_text)


class _TimedReceive:
    """A checkpoint engine's ``receive_weights``: inside a traced replica sync, its stream timed (else untouched)."""

    def __init__(self, receive: Callable[..., Any]) -> None:
        self.receive = receive

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.receive(*args, **kwargs)
        timed = safe(_timed_export, result, False)
        return result if timed is None else timed


def _time_receive(engine: Any) -> None:
    """verl calls ``self.checkpoint_engine.receive_weights(...)`` on its engine object, whatever its class (NCCL,
    NIXL, a plugin's): that object's method is wrapped once, in place."""
    if engine is None or isinstance(vars(engine).get("receive_weights"), _TimedReceive):
        return
    receive = getattr(engine, "receive_weights", None)
    if callable(receive):
        engine.receive_weights = _TimedReceive(receive)


def _watch(call: str, step: int, parent: Any, coro: Coroutine[Any, Any, Any]) -> int | None:
    stalls = trackers.current().services.stalls()
    if stalls is None:
        return None
    # the stall reads verl's coroutine: Ray runs the actor method in a compiled coroutine that shows no await chain
    return stalls.enter(sc.PHASE_UPDATE_WEIGHTS, call=call, step=step, parent=parent, awaits=coro)


def _end(sync: Any, exc: BaseException | None) -> None:
    if sync is not None:
        sync.end(exc)
        trackers.current().services.flush_soon()


async def _synced(coro: Coroutine[Any, Any, Any], call: str, step: int, sync: Any) -> Any:
    token = safe(_watch, call, step, sync.span if sync is not None else None, coro)
    ctx = _SYNC.set(sync) if sync is not None else None
    try:
        with on_exit(unwatch, token), on_exit(_end, sync):
            return await coro
    finally:
        if ctx is not None:
            _SYNC.reset(ctx)


def _wrap(call: str, replica: bool) -> Callable[..., Any]:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        result = wrapped(*args, **kwargs)
        if not isinstance(result, Coroutine):  # another verl's synchronous method: nothing to watch
            return result
        step = weight_sync_step(args, kwargs)
        if replica:
            safe(_replica_worker)
        mode = None if replica else kwargs.get("mode", args[1] if len(args) > 1 else None)
        sync = safe(_begin, instance, step, mode, replica)
        return _synced(result, call, step, sync)

    return wrapper


actor_update_weights = _wrap(sc.CALL_WEIGHT_SEND, replica=False)
replica_update_weights = _wrap(sc.CALL_WEIGHT_RECEIVE, replica=True)


def _replica_worker() -> None:
    """This process is a replica's worker, unless it already said it is something else (before its first span)."""
    m = trackers.current()
    if m.runtime.process_role == sc.PROCESS_ROLE_OTHER:
        m.wire(sc.PROCESS_ROLE_REPLICA_WORKER)


def _remember(worker: Any, traceparent: str, step: int) -> None:
    """Run in a replica's worker process (Ray's ``__ray_call__``): its next sync is of ``step``'s trace."""
    safe(_replica_worker)
    safe(remember_trace, worker, traceparent, step)


def _tell_replicas(manager: Any) -> None:
    from opentelemetry import trace

    from verl_otel.telemetry.propagation import inject

    steps = trackers.current().steps
    phase = next((p for name in sc.WEIGHT_SYNC_PHASES if (p := steps.innermost_span(name)) is not None), None)
    if phase is None or steps.step_number < 0:
        return  # not in a weight-sync phase of an open step (the sync before the first step): stall watch only
    traceparent = inject(trace.set_span_in_context(phase))
    if traceparent is None:
        return
    for replica in getattr(manager, "replicas", None) or ():
        for handle in getattr(replica, "workers", None) or ():
            call = getattr(handle, "__ray_call__", None)
            if call is not None:  # fire and forget: one small task per replica worker, nothing waits for it
                call.remote(_remember, traceparent, steps.step_number)


def manager_build_process_group(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """verl's ``CheckpointEngineManager.build_process_group`` in the trainer, called by its ``update_weights`` (a
    checkpoint engine's sync, not ``naive``) before it starts the replicas' syncs: each replica worker is told the
    open step's trace and number, as a training worker learns them from its traced calls; the worker's sync of
    another step (its ``global_steps``) gets no span. (``update_weights`` itself is not wrapped: verl's
    ``auto_await`` reads its caller's frame to decide whether to hand back the coroutine.)"""
    safe(_tell_replicas, instance)
    return wrapped(*args, **kwargs)


def _timed_export(result: Any, pair: bool = True) -> Any:
    """``result`` with its weights stream timed by the running sync: the export's (stream, peft config) pair, or a
    checkpoint engine's received stream (``pair=False``)."""
    sync = _SYNC.get()
    if sync is None:
        return result
    if not pair:
        return sync.stream(result)
    if not isinstance(result, tuple) or len(result) != 2:
        return result
    return (sync.stream(result[0]), result[1])


def per_tensor_param(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """verl's model engine's ``(weights generator, peft config)``: during a traced sync, the generator timed."""
    result = wrapped(*args, **kwargs)
    timed = safe(_timed_export, result)
    return result if timed is None else timed
