"""Trainer side of the worker spans: verl's ``RayWorkerGroup`` builds one callable per worker
method with ``func_generator``; for the methods in ``semconv.WORKER_SPAN_NAMES`` ours puts the
trainer's current traceparent into the batch argument for the duration of the call (Ray serialises
the arguments when the call is submitted, so the trainer's batch is restored right after), and tells
the stall watch whom the trainer now waits on (``1 train_worker call compute_log_prob, rank 0``: a
trainer phase that stalls meanwhile says so)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl_otel import semconv as sc
from verl_otel.hooks._safe import safe
from verl_otel.hooks.stall_watch import answered, sent


def _attach(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], None] | None:
    from verl_otel import trackers
    from verl_otel.hooks.verl_batches import find_batch, put
    from verl_otel.telemetry.propagation import inject

    traceparent = inject(trackers.current().steps.current_context())
    if traceparent is None:
        return None
    batch = find_batch(args, kwargs)
    return put(batch, traceparent) if batch is not None else None


def _send(group: Any, method: str, blocking: bool) -> int | None:
    size = getattr(group, "world_size", None)
    return sent(sc.PROCESS_ROLE_WORKER, method, size if isinstance(size, int) else None, blocking)


def _carrying(functor: Any, group: Any, method: str, blocking: bool) -> Any:
    """The same callable (same class name, which verl uses for observability) that carries the
    trace context in its batch argument and tells the stall watch it was sent."""
    base = type(functor)

    def __call__(this: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807
        undo = safe(_attach, args, kwargs) if method in sc.WORKER_SPAN_NAMES else None
        told = safe(_send, group, method, blocking)
        try:
            return base.__call__(this, *args, **kwargs)
        finally:
            if undo is not None:
                safe(undo)
            if told is not None:
                safe(answered, told)

    return type(base.__name__, (base,), {"__call__": __call__})()


#: the worker methods a trainer phase waits on: the traced ones and the worker side of a weight sync
_WATCHED = (*sc.WORKER_SPAN_NAMES, "update_weights")


def _traced_method(method: str) -> str | None:
    """verl's name of ``method``: colocated (fused) worker groups prefix it with the role,
    e.g. ``actor_rollout_update_actor``."""
    for name in _WATCHED:
        if method == name or method.endswith("_" + name):
            return name
    return None


def func_generator(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    functor = wrapped(*args, **kwargs)
    method = str(args[1] if len(args) > 1 else kwargs.get("method_name"))
    traced = _traced_method(method)
    if traced is None:
        return functor
    group = args[0] if args else kwargs.get("self")
    blocking = bool(args[5] if len(args) > 5 else kwargs.get("blocking", True))
    return safe(_carrying, functor, group, traced, blocking) or functor
