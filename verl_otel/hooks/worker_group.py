"""Trainer side of the worker spans: verl's ``RayWorkerGroup`` builds one callable per worker
method with ``func_generator``; for the methods in ``semconv.WORKER_SPAN_NAMES`` ours puts the
trainer's current traceparent into the batch argument for the duration of the call (Ray serialises
the arguments when the call is submitted, so the trainer's batch is restored right after)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl_otel import semconv as sc
from verl_otel.hooks._safe import safe


def _attach(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], None] | None:
    from verl_otel import model
    from verl_otel.hooks.verl_batches import find_batch, put
    from verl_otel.telemetry.propagation import inject

    traceparent = inject(model.current().steps.current_context())
    if traceparent is None:
        return None
    batch = find_batch(args, kwargs)
    return put(batch, traceparent) if batch is not None else None


def _carrying(functor: Any) -> Any:
    """The same callable (same class name, which verl uses for observability) that carries the
    trace context in its batch argument."""
    base = type(functor)

    def __call__(this: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807
        undo = safe(_attach, args, kwargs)
        try:
            return base.__call__(this, *args, **kwargs)
        finally:
            if undo is not None:
                safe(undo)

    return type(base.__name__, (base,), {"__call__": __call__})()


def _traced_method(method: str) -> str | None:
    """verl's name of ``method``: colocated (fused) worker groups prefix it with the role,
    e.g. ``actor_rollout_update_actor``."""
    for name in sc.WORKER_SPAN_NAMES:
        if method == name or method.endswith("_" + name):
            return name
    return None


def func_generator(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    functor = wrapped(*args, **kwargs)
    method = str(args[1] if len(args) > 1 else kwargs.get("method_name"))
    if _traced_method(method) is None:
        return functor
    return safe(_carrying, functor) or functor
