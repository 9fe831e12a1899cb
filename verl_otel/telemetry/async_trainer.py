"""The trainer process of the async trainers: fully_async's trainer (staleness of the batches it takes,
its step span's links to the rollouter windows that fed it, its idle ratio) and v1's colocate_async /
separate_async (a training step's links to the steps that submitted its prompts).

The hooks (hooks/async_rollout.py) read verl's objects and hand over plain values: the window tags of
a batch's samples, the parameter versions, a reader of the trainer's current parameter version.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext

from verl_otel import semconv as sc
from verl_otel.process.metrics import Reading
from verl_otel.telemetry.propagation import extract

_TRAINER = (sc.PROCESS_ROLE_TRAINER,)


def _none() -> float | None:
    return None


class TrainerSide:
    """fully_async's trainer: staleness of the batches taken, links to the rollouter windows that fed the
    step, and the live idle ratio (time waiting for samples in this version's window)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.param_version: Callable[[], float | None] = _none  # the trainer's weights version, read now
        self.queue_depth: float | None = None
        self.staleness_max: float | None = None
        self.staleness_mean: float | None = None
        self._pending: list[tuple[str, int]] = []
        self._seen = False
        self._cycle_version: float | None = None
        self._cycle_start = time.monotonic()
        self._waited = 0.0
        self._wait_since: float | None = None

    # -- waiting for samples ---------------------------------------------------------------------------
    def _roll_cycle_locked(self, now: float) -> None:
        version = self.param_version()
        if version != self._cycle_version:
            self._cycle_version, self._cycle_start, self._waited = version, now, 0.0

    def wait_started(self, param_version: Callable[[], float | None]) -> None:
        now = time.monotonic()
        with self._lock:
            self.param_version, self._seen = param_version, True
            self._roll_cycle_locked(now)
            self._wait_since = now

    def wait_ended(self) -> None:
        now = time.monotonic()
        with self._lock:
            if self._wait_since is not None:
                self._waited += now - self._wait_since
                self._wait_since = None

    def idle_ratio(self, now: float) -> float | None:
        with self._lock:
            if not self._seen:
                return None
            self._roll_cycle_locked(now)
            waited = self._waited + (now - self._wait_since if self._wait_since is not None else 0.0)
            return min(1.0, waited / max(now - self._cycle_start, 1e-6))

    def queue_taken(self, depth: float) -> None:
        """The queue's length right after the trainer took a sample."""
        self.queue_depth = depth

    # -- the batch --------------------------------------------------------------------------------------
    def samples_assembled(self, tags: Sequence[tuple[str, int]]) -> None:
        """The (traceparent, version) window tags of the samples verl assembles into the next batch."""
        with self._lock:
            self._pending = list(tags)

    def batch_taken(self, current: float | None, versions: Sequence[int], step_span: Span | None) -> None:
        """verl collected the batch's metrics: ``versions`` are the parameter versions its samples were
        generated with, ``current`` the trainer's. Staleness gauges and the step span's links."""
        with self._lock:
            self._seen = True
            pending, self._pending = self._pending, []
        stale = [current - v for v in versions] if current is not None else []
        if stale:
            self.staleness_max, self.staleness_mean = max(stale), sum(stale) / len(stale)
        if step_span is None or not pending:
            return
        for (tp, version), count in sorted(Counter(pending).items(), key=lambda kv: kv[0][1]):
            ctx = _span_context(tp)
            if ctx is None:
                continue
            attrs: dict[str, Any] = {sc.ATTR_PARAM_VERSION: version, sc.ATTR_ASYNC_SAMPLES: count}
            if current is not None:
                attrs[sc.ATTR_STALENESS] = int(current) - int(version)
            step_span.add_link(ctx, attrs)

    def console_note(self) -> str | None:
        """Appended to fully_async's step line: the weights version and the last batch's staleness."""
        version = self.param_version()
        if version is None:
            return None
        note = f"param version {int(version)}"
        if self.staleness_max is not None and self.staleness_mean is not None:
            note += f", staleness max {self.staleness_max:g} mean {self.staleness_mean:.2f}"
        return note

    # -- gauges -------------------------------------------------------------------------------------------
    def readings(self) -> Iterable[Reading]:
        version = self.param_version()
        if version is not None:
            yield sc.ASYNC_PARAM_VERSION, _TRAINER, version
        if self.queue_depth is not None:
            yield sc.ASYNC_QUEUE_DEPTH, _TRAINER, self.queue_depth
        if self.staleness_max is not None and self.staleness_mean is not None:
            yield sc.ASYNC_STALENESS, (), self.staleness_max
            yield sc.ASYNC_STALENESS_MEAN, (), self.staleness_mean
        idle = self.idle_ratio(time.monotonic())
        if idle is not None:
            yield sc.ASYNC_IDLE_RATIO, _TRAINER, idle


class SubmitLinks:
    """v1 async trainers (colocate_async / separate_async): the trainer submits prompts at one step and
    trains on them at a later one. The submitting step's span context is kept per step number (verl tags
    each prompt with it), and the training step's span gets a link to each submitting step."""

    KEEP = 64  # steps remembered (staleness is bounded far below this)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_step: dict[int, SpanContext] = {}

    def submitted(self, step: int, span: Span | None) -> None:
        if span is None:
            return
        with self._lock:
            self._by_step.setdefault(step, span.get_span_context())  # warmup and step 1 share number 1
            for old in sorted(self._by_step)[: -self.KEEP]:
                del self._by_step[old]

    def consumed(self, step: int, samples: Sequence[tuple[int, int | None]], step_span: Span | None) -> None:
        """``samples``: (submitting step, weights version that finished the sample) of each sample the
        training step ``step`` consumed."""
        if step_span is None:
            return
        groups: dict[int, list[int | None]] = {}
        for submit, version in samples:
            if submit != step:  # the step's own samples need no link
                groups.setdefault(submit, []).append(version)
        with self._lock:
            targets = {s: self._by_step.get(s) for s in groups}
        for submit in sorted(groups):
            ctx = targets[submit]
            if ctx is None:
                continue
            versions = [v for v in groups[submit] if v is not None]
            attrs: dict[str, Any] = {sc.ATTR_GLOBAL_STEP: submit, sc.ATTR_ASYNC_SAMPLES: len(groups[submit])}
            if versions:
                # verl's training/off_policy/trajectory_staleness: (global_steps - 1) - max_global_steps, worst
                attrs[sc.ATTR_PARAM_VERSION] = min(versions)
                attrs[sc.ATTR_STALENESS] = (step - 1) - min(versions)
            step_span.add_link(ctx, attrs)


def _span_context(traceparent: str) -> SpanContext | None:
    ctx = trace.get_current_span(extract(traceparent)).get_span_context()
    return ctx if ctx.is_valid else None
