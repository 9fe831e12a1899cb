"""Per-call spans that grow with the batch, kept bounded: per parent span only the count and the K
slowest calls, emitted once the group went idle. Used for reward-loop calls (one per sample, from
agent-loop workers) and for fully_async's rollouter samples (one per prompt group)."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode

from verl_otel.telemetry.services import Services
from verl_otel.telemetry.text import mark_failed


@dataclass
class Call:
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    error: BaseException | None
    span_id: int | None = None  # the id its span must have (a sample whose engine requests named it)
    children: Callable[[Context], None] | None = None  # makes its child spans (an agent loop's turns)


@dataclass
class Group:
    first_ns: int
    last_ns: int = 0
    calls: int = 0
    errors: int = 0
    slowest: list[tuple[int, int, Call]] = field(default_factory=list)  # min-heap of (duration, seq, call)
    touched: float = field(default_factory=time.monotonic)


class SlowestCalls:
    """Per parent span (a traceparent): the count of calls and the K slowest, handed to :meth:`_emit` once
    no call for that parent came for ``idle_s`` (the recording side cannot know when the parent ends)."""

    def __init__(self, services: Services, max_spans: int, idle_s: float = 2.0, background: bool = True) -> None:
        self.services = services
        self.max_spans, self.idle_s, self.background = max_spans, idle_s, background
        self._lock = threading.Lock()
        self._groups: dict[str, Group] = {}
        self._seq = itertools.count()
        self._ticking = False

    def record(
        self, parent: str, start_ns: int, end_ns: int, attributes: dict[str, Any], error: BaseException | None = None
    ) -> None:
        """One finished call (hot path: a dict lookup and a heap push under a lock)."""
        call = Call(start_ns, end_ns, attributes, error)
        key = (end_ns - start_ns, next(self._seq), call)
        with self._lock:
            group = self._groups.get(parent)
            if group is None:
                group = self._groups[parent] = Group(first_ns=start_ns)
            group.first_ns = min(group.first_ns, start_ns)
            group.last_ns = max(group.last_ns, end_ns)
            group.calls += 1
            group.errors += error is not None
            group.touched = time.monotonic()
            if len(group.slowest) < self.max_spans:
                heapq.heappush(group.slowest, key)
            elif self.max_spans and key[0] > group.slowest[0][0]:
                heapq.heapreplace(group.slowest, key)
            start_ticking = self.background and not self._ticking
            self._ticking = self._ticking or start_ticking
        if start_ticking:  # idle groups are emitted on the runtime's flusher thread (no thread of our own)
            self.services.every_tick(self.emit)

    def would_keep(self, parent: str, duration_ns: int) -> bool:
        """Whether a call this long would be among ``parent``'s K slowest now: a caller reads what only a kept
        call's span shows (its attributes) for those alone."""
        with self._lock:
            group = self._groups.get(parent)
            if group is None or len(group.slowest) < self.max_spans:
                return self.max_spans > 0
            return duration_ns > group.slowest[0][0]

    def emit(self, idle_only: bool = True, parents: Callable[[str], bool] | None = None) -> int:
        """Emit the groups idle for ``idle_s`` (all of them with ``idle_only=False``; of those only the
        parents ``parents`` accepts, if given); how many."""
        now = time.monotonic()
        with self._lock:
            ready = [
                p
                for p, g in self._groups.items()
                if (not idle_only or now - g.touched >= self.idle_s) and (parents is None or parents(p))
            ]
            groups = [(p, self._groups.pop(p)) for p in ready]
        for parent, group in groups:
            self._emit(parent, group)
        if groups:
            self.services.flush_soon()
        return len(groups)

    def _emit(self, parent: str, group: Group) -> None:
        """Export one idle group (subclasses: the span shape)."""
        raise NotImplementedError


def emit_calls(services: Services, name: str, parent: Context, calls: Iterable[Call]) -> None:
    """One ``name`` span per call under ``parent``, in start order; a failed call's span is marked failed.
    The one way the K slowest calls of a group (reward calls, rollout samples) become spans."""
    tracer = services.tracer()
    for call in sorted(calls, key=lambda c: c.start_ns):
        with services.preset_span_id(call.span_id):
            span = tracer.start_span(name, context=parent, attributes=call.attributes, start_time=call.start_ns)
        if call.children is not None:
            call.children(trace.set_span_in_context(span))
        if call.error is not None:
            mark_failed(span, call.error, services.settings.max_text)
        span.end(end_time=call.end_ns)


def emit_group(
    services: Services,
    name: str,
    parent: Context,
    attributes: dict[str, Any],
    start_ns: int,
    end_ns: int,
    child: str,
    calls: Iterable[Call],
    errors: int,
    what: str,
) -> None:
    """A group span from ``start_ns`` to ``end_ns`` with its calls as ``child`` spans under it; ERROR with
    "N <what> failed" when any call of the group failed (spanned or not)."""
    group: Span = services.tracer().start_span(name, context=parent, attributes=attributes, start_time=start_ns)
    emit_calls(services, child, trace.set_span_in_context(group), calls)
    if errors:
        group.set_status(Status(StatusCode.ERROR, f"{errors} {what} failed"))
    group.end(end_time=end_ns)
