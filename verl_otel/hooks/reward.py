"""Reward-loop hooks: each ``RewardLoopWorker.compute_score`` call whose data carries the trainer's
context is recorded for the reward spans (telemetry/reward_spans.py). The context arrives in the
call's non-tensor batch, put there on one of verl's two paths to the reward-loop workers: streaming,
one call per sample from an agent-loop worker (``compute_score`` in hooks/rollout.py), or the batch
path, the trainer's ``RewardLoopManager.compute_rm_score`` (a colocated reward model), which splits
the batch into per-sample ``compute_score`` calls (a column here, so each row carries it). The
worker takes it out before verl's reward manager runs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import Any

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel.hooks._safe import on_exit, safe
from verl_otel.hooks.stall_watch import unwatch, watch
from verl_otel.hooks.verl_objects import reward_call_attributes, run_names
from verl_otel.telemetry.propagation import inject, traceparent_of


def _wire(worker: Any) -> None:
    """A reward-loop worker (the trackers' row: its spans, emitted at exit)."""
    m = trackers.current()
    if not m.wired(sc.PROCESS_ROLE_REWARD):  # per reward call: the config is read once
        m.wire(sc.PROCESS_ROLE_REWARD, **run_names(worker))


def _take_parent(worker: Any, data: Any) -> str | None:
    non_tensor = getattr(data, "non_tensor_batch", None)
    if not isinstance(non_tensor, dict) or sc.TRACEPARENT_KEY not in non_tensor:
        return None
    _wire(worker)
    values = non_tensor.pop(sc.TRACEPARENT_KEY)
    return str(values[0]) if len(values) else None


def _record(parent: str, data: Any, start_ns: int, results: list[Any], error: BaseException | None) -> None:
    attrs = reward_call_attributes(data, results[0] if results else None)
    trackers.current().reward_spans.record(parent, start_ns, time.time_ns(), attrs, error)


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
    return _timed(coro, parent, data) if parent and trackers.current().wired(sc.PROCESS_ROLE_REWARD) else coro


def _context_column(data: Any) -> Callable[[], None] | None:
    """Add the trainer's context as a non-tensor column of ``data``; returns the undo."""
    non_tensor = getattr(data, "non_tensor_batch", None)
    traceparent = inject(trackers.current().steps.current_context())
    if traceparent is None or not isinstance(non_tensor, dict) or sc.TRACEPARENT_KEY in non_tensor:
        return None
    import numpy as np

    non_tensor[sc.TRACEPARENT_KEY] = np.full(len(data), traceparent, dtype=object)
    return lambda: non_tensor.pop(sc.TRACEPARENT_KEY, None)


def compute_rm_score(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    data = args[0] if args else kwargs.get("data")
    undo = safe(_context_column, data) if trackers.current().steps.active else None
    try:
        return wrapped(*args, **kwargs)
    finally:
        if undo is not None:
            safe(undo)


def _trace_id(traceparent: str) -> str:
    parts = traceparent_of(traceparent).split("-")  # W3C: version-traceid-spanid-flags
    return parts[1] if len(parts) == 4 else ""


def _emit_groups(trace_id: str | None) -> int:
    m = trackers.current()
    if not m.wired(sc.PROCESS_ROLE_REWARD):
        return 0
    match = None if trace_id is None else (lambda parent: _trace_id(parent) == trace_id)
    return m.reward_spans.emit(idle_only=False, parents=match)


async def verl_otel_emit_spans(self: Any, trace_id: str | None = None, wait_s: float = 0.0) -> int:
    """Added to verl's ``RewardLoopWorker`` (a Ray actor; hooks/targets.py). The trainer calls it when a
    step ended, when every reward call of that step's trace has returned: its groups are emitted now, not
    after the idle time, which the last step never gets (Ray ends this process without ``atexit``). At
    fit end (``trace_id`` None: every group) it also waits up to ``wait_s`` for the export, on a thread (this
    runs on the actor's event loop), then writes what is left to unsent/. Never raises; returns the groups
    emitted."""
    emitted = safe(_emit_groups, trace_id) or 0
    if trace_id is None:  # fit end: what the collector did not take in time goes to unsent/ (no atexit here)
        import asyncio

        from verl_otel.hooks.worker_flush import flush_or_spill

        with contextlib.suppress(Exception):  # the trainer waits with its own deadline
            await asyncio.to_thread(flush_or_spill, self, min(wait_s, 60.0))
    return emitted
