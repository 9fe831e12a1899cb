"""Spans of a reward-loop worker's per-sample ``compute_score`` calls, in the trainer's trace.

Agent-loop workers call the reward loop once per sample, so spanning every call would grow with
the batch. As for rollout samples, this process keeps per trainer span (the traceparent that came
with the calls) the count and only the K slowest calls; a group is emitted once no call for it came
for ``idle_s`` (the reward worker cannot know when a rollout ends): a ``reward.worker`` span from
the first call to the last, with the slowest ``reward.compute_score`` spans under it.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from verl_otel import semconv as sc
from verl_otel.export import setup
from verl_otel.telemetry.propagation import extract


@dataclass
class _Call:
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    error: BaseException | None


@dataclass
class _Group:
    first_ns: int
    last_ns: int = 0
    calls: int = 0
    errors: int = 0
    slowest: list[tuple[int, int, _Call]] = field(default_factory=list)  # min-heap of (duration, seq, call)
    touched: float = field(default_factory=time.monotonic)


class RewardSpans:
    def __init__(self, max_spans: int, idle_s: float = 2.0, background: bool = True) -> None:
        self.max_spans, self.idle_s, self.background = max_spans, idle_s, background
        self._lock = threading.Lock()
        self._groups: dict[str, _Group] = {}
        self._seq = itertools.count()
        self._flusher: threading.Thread | None = None

    def record(self, parent: str, start_ns: int, end_ns: int, attributes: dict[str, Any],
               error: BaseException | None = None) -> None:
        """One finished call (hot path: a dict lookup and a heap push under a lock)."""
        call = _Call(start_ns, end_ns, attributes, error)
        key = (end_ns - start_ns, next(self._seq), call)
        with self._lock:
            group = self._groups.get(parent)
            if group is None:
                group = self._groups[parent] = _Group(first_ns=start_ns)
            group.first_ns = min(group.first_ns, start_ns)
            group.last_ns = max(group.last_ns, end_ns)
            group.calls += 1
            group.errors += error is not None
            group.touched = time.monotonic()
            if len(group.slowest) < self.max_spans:
                heapq.heappush(group.slowest, key)
            elif self.max_spans and key[0] > group.slowest[0][0]:
                heapq.heapreplace(group.slowest, key)
            if self._flusher is None and self.background:
                self._flusher = threading.Thread(target=self._flush_loop, name="verl-otel-reward-spans", daemon=True)
                self._flusher.start()

    def flush(self, idle_only: bool = True) -> int:
        """Emit the groups idle for ``idle_s`` (all of them with ``idle_only=False``); how many."""
        now = time.monotonic()
        with self._lock:
            ready = [p for p, g in self._groups.items() if not idle_only or now - g.touched >= self.idle_s]
            groups = [(p, self._groups.pop(p)) for p in ready]
        for parent, group in groups:
            self._emit(parent, group)
        if groups:
            setup.get().flush_finished()
        return len(groups)

    def _flush_loop(self) -> None:
        while True:
            time.sleep(min(1.0, self.idle_s / 2))
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - a telemetry thread never dies of an export error
                pass

    def _emit(self, parent: str, group: _Group) -> None:
        tracer = setup.get().tracer
        calls = sorted(group.slowest, key=lambda k: k[2].start_ns)
        ws = tracer.start_span(sc.SPAN_REWARD_WORKER, context=extract(parent), start_time=group.first_ns, attributes={
            sc.ATTR_REWARD_CALLS: group.calls, sc.ATTR_REWARD_CALLS_SPANNED: len(calls),
            sc.ATTR_REWARD_ERRORS: group.errors})
        ctx = trace.set_span_in_context(ws)
        for _, _, call in calls:
            sp = tracer.start_span(sc.SPAN_REWARD_SCORE, context=ctx, attributes=call.attributes,
                                   start_time=call.start_ns)
            if call.error is not None:
                sp.record_exception(call.error)
                sp.set_status(Status(StatusCode.ERROR, repr(call.error)[:512]))
            sp.end(end_time=call.end_ns)
        if group.errors:
            ws.set_status(Status(StatusCode.ERROR, f"{group.errors} reward calls failed"))
        ws.end(end_time=group.last_ns)
