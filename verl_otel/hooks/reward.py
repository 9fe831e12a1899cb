"""Reward-loop hooks: each ``RewardLoopWorker.compute_score`` call whose data carries the trainer's
context is recorded for the reward spans (telemetry/reward_spans.py). The context arrives in the
call's non-tensor batch, put there on one of verl's two paths to the reward-loop workers: streaming,
one call per sample from an agent-loop worker (``compute_score`` in hooks/rollout.py), or the batch
path, the trainer's ``RewardLoopManager.compute_rm_score`` (a colocated reward model), which splits
the batch into per-sample ``compute_score`` calls (a column here, so each row carries it). The
worker takes it out before verl's reward manager runs."""

from __future__ import annotations

import atexit
import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import Any

from verl_otel import runtime
from verl_otel import semconv as sc
from verl_otel.hooks._safe import on_exit, safe
from verl_otel.hooks.stall_watch import unwatch, watch
from verl_otel.hooks.verl_objects import reward_call_attributes, run_names
from verl_otel.telemetry.propagation import inject
from verl_otel.telemetry.reward_spans import RewardSpans
from verl_otel.telemetry.steps import TRACER

_SPANS: list[RewardSpans] = []


def _wire_reward(rt: runtime.Runtime) -> None:
    spans = RewardSpans(rt.settings.sample_spans)
    _SPANS.append(spans)
    atexit.register(safe, spans.flush, False)  # the last groups, where the process gets to exit


def _wire(worker: Any) -> None:
    rt = runtime.current()
    if not rt.wired(sc.ROLE_REWARD):  # per reward call: the config is read once
        rt.wire(sc.ROLE_REWARD, setup=_wire_reward, **run_names(worker))


def _take_parent(worker: Any, data: Any) -> str | None:
    non_tensor = getattr(data, "non_tensor_batch", None)
    if not isinstance(non_tensor, dict) or sc.TRACEPARENT_KEY not in non_tensor:
        return None
    _wire(worker)
    values = non_tensor.pop(sc.TRACEPARENT_KEY)
    return str(values[0]) if len(values) else None


def _record(parent: str, data: Any, start_ns: int, results: list[Any], error: BaseException | None) -> None:
    attrs = reward_call_attributes(data, results[0] if results else None)
    _SPANS[0].record(parent, start_ns, time.time_ns(), attrs, error)


async def _timed(coro: Coroutine[Any, Any, Any], parent: str, data: Any) -> Any:
    results: list[Any] = []
    token = safe(watch, sc.CALL_REWARD, parent)
    with on_exit(_record, parent, data, time.time_ns(), results), on_exit(unwatch, token):
        results.append(await coro)
        return results[0]


def compute_score(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    data = args[0] if args else kwargs.get("data")
    parent = safe(_take_parent, instance, data)
    coro = wrapped(*args, **kwargs)
    return _timed(coro, parent, data) if parent and _SPANS else coro


def _context_column(data: Any) -> Callable[[], None] | None:
    """Add the trainer's context as a non-tensor column of ``data``; returns the undo."""
    non_tensor = getattr(data, "non_tensor_batch", None)
    traceparent = inject(TRACER.current_context())
    if traceparent is None or not isinstance(non_tensor, dict) or sc.TRACEPARENT_KEY in non_tensor:
        return None
    import numpy as np

    non_tensor[sc.TRACEPARENT_KEY] = np.full(len(data), traceparent, dtype=object)
    return lambda: non_tensor.pop(sc.TRACEPARENT_KEY, None)


def compute_rm_score(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    data = args[0] if args else kwargs.get("data")
    undo = safe(_context_column, data) if TRACER.active else None
    try:
        return wrapped(*args, **kwargs)
    finally:
        if undo is not None:
            safe(undo)


def _trace_id(traceparent: str) -> str:
    parts = traceparent.split("-")  # W3C: version-traceid-spanid-flags
    return parts[1] if len(parts) == 4 else ""


def _emit_groups(trace_id: str | None) -> int:
    if not _SPANS:
        return 0
    match = None if trace_id is None else (lambda parent: _trace_id(parent) == trace_id)
    return _SPANS[0].flush(idle_only=False, parents=match)


async def verl_otel_flush(self: Any, trace_id: str | None = None, wait_s: float = 0.0) -> int:
    """Added to verl's ``RewardLoopWorker`` (a Ray actor; hooks/targets.py). The trainer calls it when a
    step ended, when every reward call of that step's trace has returned: its groups are emitted now, not
    after the idle time, which the last step never gets (Ray ends this process without ``atexit``). At
    fit end (``trace_id`` None: every group) it also waits up to ``wait_s`` for the export, on a thread:
    this runs on the actor's event loop. Never raises; returns the groups emitted."""
    emitted = safe(_emit_groups, trace_id) or 0
    if wait_s > 0:
        import asyncio

        with contextlib.suppress(Exception):  # the trainer waits with its own deadline
            await asyncio.to_thread(runtime.current().flush_wait, min(wait_s, 60.0))
    return emitted
