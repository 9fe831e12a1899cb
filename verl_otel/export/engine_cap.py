"""A bound on an inference engine's request spans (vLLM's ``llm_request``), per trace (a trainer step) in one
rollout server: without it their number grows with the batch (one per request, in every sampled trace),
while the ``rollout.sample`` spans they sit under are capped (the VERL_OTEL_SAMPLE_SPANS slowest per worker
and batch). The engine cannot know which samples get a span (that is chosen when the worker's batch is done),
so it keeps what is likeliest to be under them, the slowest requests:

- the first ``keep`` requests of a trace pass at once (a small run exports every one, as before);
- of the rest, the ``keep`` slowest are held and passed on once no request of that trace ended for
  ``idle_s`` (on the flusher's tick), or at shutdown; the others are not exported.

So a trace gets at most ``2 * keep`` engine spans per rollout server, whatever the batch size."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor


@dataclass
class _Trace:
    passed: int = 0
    held: list[tuple[int, int, Any]] = field(default_factory=list)  # min-heap of (duration, seq, span)
    skipped: int = 0
    touched: float = field(default_factory=time.monotonic)


class EngineSpanCap(SpanProcessor):
    """Wraps the processor that exports (``inner``); see the module's docstring."""

    def __init__(self, inner: SpanProcessor, keep: int, idle_s: float = 2.0) -> None:
        self.inner, self.keep, self.idle_s = inner, max(0, keep), idle_s
        self._lock = threading.Lock()
        self._traces: dict[int, _Trace] = {}
        self._seq = itertools.count()
        self.skipped = 0  # requests not exported, all time

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.inner.on_start(span, parent_context=parent_context)

    def on_end(self, span: Any) -> None:
        trace_id = span.context.trace_id
        key = ((span.end_time or 0) - (span.start_time or 0), next(self._seq), span)
        now = True
        with self._lock:
            t = self._traces.get(trace_id)
            if t is None:
                t = self._traces[trace_id] = _Trace()
            t.touched = time.monotonic()
            if t.passed < self.keep:
                t.passed += 1
            else:
                now = False
                if len(t.held) < self.keep:
                    heapq.heappush(t.held, key)
                elif self.keep and key[0] > t.held[0][0]:
                    heapq.heapreplace(t.held, key)
                    t.skipped += 1
                else:
                    t.skipped += 1
        if now:
            self.inner.on_end(span)

    def release(self, idle_only: bool = True) -> int:
        """Pass on the held spans of the traces idle for ``idle_s`` (all with ``idle_only=False``), forgetting
        those traces; how many spans."""
        now = time.monotonic()
        with self._lock:
            done = [k for k, t in self._traces.items() if not idle_only or now - t.touched >= self.idle_s]
            gone = [self._traces.pop(k) for k in done]
        spans = [s for t in gone for _, _, s in sorted(t.held, key=lambda h: h[2].start_time or 0)]
        self.skipped += sum(t.skipped for t in gone)
        for span in spans:
            self.inner.on_end(span)
        return len(spans)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.release()
        return bool(self.inner.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self.release(idle_only=False)
        self.inner.shutdown()
