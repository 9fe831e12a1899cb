"""fully_async's rollouter process: one ``rollouter.generate`` span per parameter-version window (from one
parameter sync, verl's ``reset_staleness``, to the next), the K slowest samples of each window as
``rollout.sample`` spans under it, a ``rollouter.validate`` span, and the rollouter's gauges.

Each sample the rollouter starts in a window is tagged with the window's (traceparent, version) by the
hooks (hooks/async_rollout.py); the tag travels with the sample to the trainer process
(telemetry/async_trainer.py), whose step span links back to the window. The hooks read verl's objects;
this module gets plain values: a :class:`RollouterCounters` reader for the counters (called at scrape time
and at window edges, so nothing is counted twice) and per-sample attribute dicts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from verl_otel import semconv as sc
from verl_otel.process.metrics import Reading
from verl_otel.telemetry.propagation import extract, inject
from verl_otel.telemetry.services import Services
from verl_otel.telemetry.slowest_calls import Group, SlowestCalls, emit_calls
from verl_otel.telemetry.text import mark_failed

_ROLLOUTER = (sc.PROCESS_ROLE_ROLLOUTER,)


@dataclass(frozen=True)
class RollouterCounters:
    """The rollouter's own counters, read now (None where this verl does not keep one)."""

    produced: float | None = None  # samples generated into the queue, all time
    dropped: float | None = None  # samples dropped as too stale, all time
    capacity: float | None = None  # the queue's size limit
    paused: bool = False
    inflight: float | None = None  # generation tasks running
    window_start: float | None = None  # wall time the window's parameter sync finished
    idle_start: float | None = None  # wall time the rollouter last blocked (queue full / staleness bound)

    def idle_ratio(self, now: float) -> float | None:
        """verl's fully_async/rollouter/idle_ratio evaluated now: once the rollouter blocks inside the
        window it stays idle until the next parameter sync."""
        if self.window_start is None or self.idle_start is None:
            return None
        if self.idle_start <= self.window_start:
            return 0.0
        elapsed = max(now - self.window_start, 1e-6)
        return min(1.0, max(0.0, 1.0 - (self.idle_start - self.window_start) / elapsed))


@dataclass
class _Window:
    span: Span
    version: int
    produced0: float
    dropped0: float
    tag: tuple[str, int] | None
    start: float = field(default_factory=time.monotonic)


class WindowSamples(SlowestCalls):
    """The K slowest samples of a window, as ``rollout.sample`` spans under its ``rollouter.generate`` span."""

    def _emit(self, parent: str, group: Group) -> None:
        emit_calls(self.services, sc.SPAN_ROLLOUT_SAMPLE, extract(parent), (call for _, _, call in group.slowest))


class RolloutWindows:
    """The rollouter process' windows and counts; ``read`` (set at fit start) reads the rollouter's counters."""

    def __init__(self, services: Services) -> None:
        self._svc = services
        self._lock = threading.Lock()
        self.read: Callable[[], RollouterCounters] | None = None
        self.base_version = 0  # version of the first parameter sync (a resumed run starts later)
        self.syncs = 0  # reset_staleness calls seen: the first is the sync before fit()
        self.queue_depth: float | None = None
        self.gpus = 1  # the rollout pool's GPUs (rollout.nnodes x n_gpus_per_node): the goodput split's
        self._window: _Window | None = None
        self.sample_spans: WindowSamples | None = None
        self.validating: Span | None = None  # the open rollouter.validate span (validation generations go there)
        #: (version, samples queued, dropped, idle ratio) of each window that closed (the console line)
        self.on_window_closed: list[Callable[[int, int, int, float | None], None]] = []

    @property
    def version(self) -> int:
        return self.base_version + max(0, self.syncs - 1)

    @property
    def active(self) -> bool:
        """True in the rollouter process once its fit() started."""
        return self.read is not None

    def _readings(self) -> RollouterCounters:
        read = self.read
        return read() if read is not None else RollouterCounters()

    # -- inputs from the hooks ------------------------------------------------------------------
    def resumed_at(self, version: int) -> None:
        """verl's ``load_checkpoint`` resumed the rollouter at parameter ``version``."""
        self.base_version = max(0, int(version))

    def fit_started(self, read: Callable[[], RollouterCounters]) -> None:
        with self._lock:
            self.read = read
            if self.sample_spans is None:
                self.sample_spans = WindowSamples(self._svc, self._svc.settings.sample_spans)
            if self._window is None:
                self._open_locked()

    def fit_ended(self, exc: BaseException | None) -> None:
        with self._lock:
            self._close_locked(None, exc)
        if self.sample_spans is not None:
            self.sample_spans.emit(idle_only=False)
        self._svc.flush_wait()

    def sample_finished(
        self,
        tag: tuple[str, int] | None,
        start_ns: int,
        attributes: dict[str, Any],
        error: BaseException | None,
        end_ns: int | None = None,
    ) -> None:
        """A sample of the window ``tag`` went through generation into the queue (or failed)."""
        spans = self.sample_spans
        if spans is not None and tag and tag[0]:
            spans.record(tag[0], start_ns, time.time_ns() if end_ns is None else end_ns, attributes, error)

    def keeps(self, tag: tuple[str, int] | None, duration_ns: int) -> bool:
        """Whether a sample of the window ``tag`` this long would get a span (is among its slowest so far)."""
        spans = self.sample_spans
        return spans is not None and bool(tag and tag[0]) and spans.would_keep(tag[0] if tag else "", duration_ns)

    def param_synced(self, idle_ratio: float | None) -> None:
        """``reset_staleness`` returned: the weights changed. Close the window (with verl's idle ratio of
        it), open the next."""
        with self._lock:
            self.syncs += 1
            if self._window is not None:
                self._close_locked(idle_ratio, None)
                self._open_locked()
        self._svc.flush_soon()

    def sample_tag(self) -> tuple[str, int] | None:
        """(traceparent, version) of the open window, for a sample starting now."""
        window = self._window
        return None if window is None else window.tag

    # -- spans ------------------------------------------------------------------------------------
    def _open_locked(self) -> None:
        version, now = self.version, self._readings()
        span = self._svc.tracer().start_span(
            sc.SPAN_ROLLOUTER_GENERATE, context=otel_context.Context(), attributes={sc.ATTR_PARAM_VERSION: version}
        )
        tp = inject(trace.set_span_in_context(span))
        self._window = _Window(span, version, now.produced or 0.0, now.dropped or 0.0, (tp, version) if tp else None)

    def _close_locked(self, idle: float | None, exc: BaseException | None) -> None:
        window, self._window = self._window, None
        if window is None:
            return
        span, now = window.span, self._readings()
        if now.produced is not None:
            span.set_attribute(sc.ATTR_ASYNC_SAMPLES, int(now.produced - window.produced0))
        if now.dropped is not None:
            span.set_attribute(sc.ATTR_ASYNC_DROPPED, int(now.dropped - window.dropped0))
        if idle is not None:
            span.set_attribute(sc.ATTR_ASYNC_IDLE_RATIO, idle)
        self._account(span, window, idle)
        if exc is not None:
            mark_failed(span, exc, self._svc.settings.max_text)
        span.end()
        if now.produced is not None:
            queued, dropped = int(now.produced - window.produced0), int((now.dropped or 0) - window.dropped0)
            for cb in self.on_window_closed:
                cb(window.version, queued, dropped, idle)

    def validate_span(self) -> Span:
        self.validating = self._svc.tracer().start_span(
            sc.SPAN_ROLLOUTER_VALIDATE,
            context=otel_context.Context(),
            attributes={sc.ATTR_PARAM_VERSION: self.version, sc.ATTR_PHASE: sc.PHASE_VALIDATE},
        )
        return self.validating

    def validate_context(self) -> otel_context.Context | None:
        """Context of the open rollouter.validate span (its agent-loop calls join it), if any."""
        span = self.validating
        return None if span is None else trace.set_span_in_context(span)

    def validate_ended(self, span: Span | None, exc: BaseException | None) -> None:
        if span is None:  # validate_span failed or had nothing to open
            return
        self.validating = None
        if exc is not None:
            mark_failed(span, exc, self._svc.settings.max_text)
        span.end()
        self._svc.flush_soon()

    def _account(self, span: Span, window: _Window, idle: float | None) -> None:
        """The rollout pool's GPU time in this window (semconv/goodput.py): blocked by the staleness limit for
        verl's idle share of it (the rollouter paused until the next sync), generating the rest."""
        wall = max(0.0, time.monotonic() - window.start) * self.gpus
        blocked = min(1.0, max(0.0, idle or 0.0)) * wall
        split = {sc.BUCKET_GENERATING: wall - blocked, sc.BUCKET_STALENESS_BLOCKED: blocked}
        span.set_attributes({sc.bucket_attr(b): round(v, 6) for b, v in split.items()})
        span.set_attribute(sc.ATTR_GOODPUT_GPUS, self.gpus)
        for bucket, gpu_s in split.items():
            self._svc.store.inc(sc.GPU_SECONDS, (sc.POOL_ROLLOUT, bucket), gpu_s)

    # -- gauges (read at scrape time) ---------------------------------------------------------------
    def readings(self) -> Iterable[Reading]:
        if self.read is None:
            return
        now = self._readings()
        for metric, value in (
            (sc.ASYNC_SAMPLES_PRODUCED, now.produced),
            (sc.ASYNC_SAMPLES_DROPPED, now.dropped),
            (sc.ASYNC_QUEUE_CAPACITY, now.capacity),
        ):
            if value is not None:
                yield metric, (), value
        yield sc.ASYNC_PARAM_VERSION, _ROLLOUTER, float(self.version)
        if self.queue_depth is not None:
            yield sc.ASYNC_QUEUE_DEPTH, _ROLLOUTER, self.queue_depth
        yield sc.ASYNC_ROLLOUTER_PAUSED, (), 1.0 if now.paused else 0.0
        if now.inflight is not None:
            yield sc.ASYNC_ROLLOUTER_INFLIGHT, (), now.inflight
        idle = now.idle_ratio(time.time())
        if idle is not None:
            yield sc.ASYNC_IDLE_RATIO, _ROLLOUTER, idle
