"""fully_async's two sides (the rollouter's parameter-version windows and the trainer's view of them), and
v1's async trainers' links from a training step to the steps that submitted its prompts.

Rollouter process: one ``rollouter.generate`` span per parameter-version window (from one parameter
sync, verl's ``reset_staleness``, to the next). Each sample the rollouter starts in a window gets
the window's (traceparent, version) as an attribute of verl's RolloutSample object, which is pickled
with it through the MessageQueue. Trainer process: the samples of a batch are grouped by window and
the open ``step`` span gets one link per window (version, sample count, staleness).

Each sample (one prompt group, from generation start to the queue) is timed; per window the K slowest
(``VERL_OTEL_SAMPLE_SPANS``) become ``rollout.sample`` spans under the window's span, emitted once the
window's samples stopped finishing (a sample may end after its window closed).

Gauges read verl's own counters off the rollouter/trainer objects at scrape time: nothing is counted
twice, and the per-sample path only sets one attribute.
"""

from __future__ import annotations

import operator
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext

from verl_otel import runtime
from verl_otel import semconv as sc
from verl_otel.telemetry.metrics import Sample
from verl_otel.telemetry.propagation import extract, inject
from verl_otel.telemetry.slowest_calls import Group, SlowestCalls, emit_calls
from verl_otel.telemetry.text import mark_failed
from verl_otel.telemetry.values import to_scalar

_ROLLOUTER = (sc.ROLE_ROLLOUTER,)
_TRAINER = (sc.ROLE_TRAINER,)


def _num(obj: Any, name: str) -> float | None:
    try:
        value = getattr(obj, name)
        return None if value is None else float(value)
    except (AttributeError, TypeError, ValueError):
        return None


@dataclass
class _Window:
    span: Span
    version: int
    produced0: float
    dropped0: float
    tag: tuple[str, int] | None


class WindowSamples(SlowestCalls):
    """The K slowest samples of a window, as ``rollout.sample`` spans under its ``rollouter.generate`` span."""

    def _emit(self, parent: str, group: Group) -> None:
        emit_calls(sc.SPAN_ROLLOUT_SAMPLE, extract(parent), (call for _, _, call in group.slowest))


def _max_int(values: Any) -> int | None:
    numbers = [v for v in (_int(x) for x in (values if values is not None else ())) if v is not None]
    return max(numbers) if numbers else None


def rollouter_sample_attributes(rollout_sample: Any) -> dict[str, Any]:
    """Attributes of one finished rollouter sample (verl's RolloutSample after generation: its
    ``full_batch`` holds the n responses)."""
    attrs: dict[str, Any] = {}
    sample_id = getattr(rollout_sample, "sample_id", None)
    if sample_id is not None:
        attrs[sc.ATTR_SAMPLE_ID] = str(sample_id)[:128]
    batch = getattr(rollout_sample, "full_batch", None)
    non_tensor = getattr(batch, "non_tensor_batch", None) or {}
    start = non_tensor.get("min_global_steps")
    end = _max_int(non_tensor.get("max_global_steps"))
    starts = [v for v in (_int(x) for x in (start if start is not None else ())) if v is not None]
    if starts:
        attrs[sc.ATTR_PARAM_VERSION] = min(starts)
    if end is not None:
        attrs[sc.ATTR_PARAM_VERSION_END] = end
    tensors = getattr(batch, "batch", None)
    try:
        mask = tensors["response_mask"] if "response_mask" in tensors.keys() else None
        attrs[sc.ATTR_SAMPLES] = int(len(batch))
        if mask is not None:
            attrs[sc.ATTR_SAMPLE_RESPONSE_TOKENS] = int(mask.sum(dim=-1).max())
    except (AttributeError, TypeError, KeyError, RuntimeError, ValueError):
        pass
    metrics = (getattr(batch, "meta_info", None) or {}).get("metrics")
    if isinstance(metrics, list):
        for field_name, attr in sc.SAMPLE_TIMING_ATTRS.items():
            values = [to_scalar(m.get(field_name))[0] for m in metrics if isinstance(m, Mapping)]
            values = [v for v in values if v is not None]
            if values:
                attrs[attr] = max(values)  # the slowest of the n responses
    return attrs


class RolloutWindows:
    """Rollouter-process state. ``rollouter`` is verl's FullyAsyncRollouter instance."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rollouter: Any = None
        self.base_version = 0  # version of the first parameter sync (a resumed run starts later)
        self.syncs = 0  # reset_staleness calls seen: the first is the sync before fit()
        self.queue_depth: float | None = None
        self._window: _Window | None = None
        self.sample_spans: WindowSamples | None = None
        self.validating: Span | None = None  # the open rollouter.validate span (validation generations go there)

    @property
    def version(self) -> int:
        return self.base_version + max(0, self.syncs - 1)

    # -- inputs from the hooks ------------------------------------------------------------------
    def resumed_from(self, rollouter: Any) -> None:
        """After verl's ``load_checkpoint``: it set ``global_steps`` to version x samples per sync + 1."""
        per_sync = _num(rollouter, "required_samples") or 0
        trigger = _num(getattr(getattr(rollouter, "config", None), "async_training", None),
                       "trigger_parameter_sync_step") or 1
        steps = _num(rollouter, "global_steps") or 1
        if per_sync > 0 and steps > 1:
            self.base_version = int((steps - 1) // (per_sync * trigger))

    def fit_started(self, rollouter: Any) -> None:
        with self._lock:
            self.rollouter = rollouter
            if self.sample_spans is None:
                self.sample_spans = WindowSamples(runtime.current().settings.sample_spans)
            if self._window is None:
                self._open_locked()

    def fit_ended(self, exc: BaseException | None) -> None:
        with self._lock:
            self._close_locked(None, exc)
        if self.sample_spans is not None:
            self.sample_spans.flush(idle_only=False)
        runtime.current().flush_wait()

    def sample_finished(self, rollout_sample: Any, start_ns: int, error: BaseException | None) -> None:
        """A sample went through generation into the queue (or failed); timed from its start."""
        tag = getattr(rollout_sample, sc.ROLLOUT_SAMPLE_TRACE_ATTR, None)
        spans = self.sample_spans
        if spans is None or not isinstance(tag, tuple) or not tag or not tag[0]:
            return
        spans.record(tag[0], start_ns, time.time_ns(), rollouter_sample_attributes(rollout_sample), error)

    def param_synced(self, timing: Mapping[str, Any] | None) -> None:
        """``reset_staleness`` returned: the weights changed. Close the window, open the next."""
        with self._lock:
            self.syncs += 1
            if self._window is not None:
                self._close_locked(timing, None)
                self._open_locked()
        runtime.current().flush_soon()

    def sample_tag(self) -> tuple[str, int] | None:
        """(traceparent, version) of the open window, for a sample starting now."""
        window = self._window
        return None if window is None else window.tag

    def statistics(self, stats: Mapping[str, Any]) -> None:
        depth = stats.get("monitor/queue/mq_queue_size")
        if isinstance(depth, (int, float)):
            self.queue_depth = float(depth)

    # -- spans ------------------------------------------------------------------------------------
    def _open_locked(self) -> None:
        version = self.version
        span = runtime.current().tracer.start_span(sc.SPAN_ROLLOUTER_GENERATE, context=otel_context.Context(),
                                             attributes={sc.ATTR_PARAM_VERSION: version})
        tp = inject(trace.set_span_in_context(span))
        self._window = _Window(span, version, _num(self.rollouter, "total_generated_samples") or 0.0,
                               _num(self.rollouter, "dropped_stale_samples") or 0.0,
                               (tp, version) if tp else None)

    def _close_locked(self, timing: Mapping[str, Any] | None, exc: BaseException | None) -> None:
        window, self._window = self._window, None
        if window is None:
            return
        span = window.span
        produced = _num(self.rollouter, "total_generated_samples")
        dropped = _num(self.rollouter, "dropped_stale_samples")
        if produced is not None:
            span.set_attribute(sc.ATTR_ASYNC_SAMPLES, int(produced - window.produced0))
        if dropped is not None:
            span.set_attribute(sc.ATTR_ASYNC_DROPPED, int(dropped - window.dropped0))
        idle = (timing or {}).get("fully_async/rollouter/idle_ratio")
        if isinstance(idle, (int, float)):
            span.set_attribute(sc.ATTR_ASYNC_IDLE_RATIO, float(idle))
        if exc is not None:
            mark_failed(span, exc, runtime.current().settings.max_text)
        span.end()
        if runtime.current().settings.console and produced is not None:
            idle_text = f", idle {float(idle):.0%}" if isinstance(idle, (int, float)) else ""
            print(f"[verl-otel] rollouter param version {window.version}: {int(produced - window.produced0)} samples "
                  f"queued, {int((dropped or 0) - window.dropped0)} dropped{idle_text}", flush=True)

    def validate_span(self) -> Span:
        self.validating = runtime.current().tracer.start_span(
            sc.SPAN_ROLLOUTER_VALIDATE, context=otel_context.Context(),
            attributes={sc.ATTR_PARAM_VERSION: self.version, sc.ATTR_PHASE: sc.PHASE_VALIDATE})
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
            mark_failed(span, exc, runtime.current().settings.max_text)
        span.end()
        runtime.current().flush_soon()

    # -- gauges (read at scrape time) ---------------------------------------------------------------
    def samples(self) -> Iterable[Sample]:
        r = self.rollouter
        if r is None:
            return
        for metric, attr in ((sc.ASYNC_SAMPLES_PRODUCED, "total_generated_samples"),
                             (sc.ASYNC_SAMPLES_DROPPED, "dropped_stale_samples"),
                             (sc.ASYNC_QUEUE_CAPACITY, "max_queue_size")):
            value = _num(r, attr)
            if value is not None:
                yield metric, (), value
        yield sc.ASYNC_PARAM_VERSION, _ROLLOUTER, float(self.version)
        if self.queue_depth is not None:
            yield sc.ASYNC_QUEUE_DEPTH, _ROLLOUTER, self.queue_depth
        yield sc.ASYNC_ROLLOUTER_PAUSED, (), 1.0 if getattr(r, "paused", False) else 0.0
        try:
            yield sc.ASYNC_ROLLOUTER_INFLIGHT, (), float(len(r.active_tasks))
        except (AttributeError, TypeError):
            pass
        idle = rollouter_idle_ratio(r, time.time())
        if idle is not None:
            yield sc.ASYNC_IDLE_RATIO, _ROLLOUTER, idle


def rollouter_idle_ratio(rollouter: Any, now: float) -> float | None:
    """verl's fully_async/rollouter/idle_ratio (reset_staleness) evaluated now: once the rollouter
    blocks (``idle_start_time`` inside the window) it stays idle until the next parameter sync."""
    start, idle_start = _num(rollouter, "step_start_time"), _num(rollouter, "idle_start_time")
    if start is None or idle_start is None:
        return None
    elapsed = max(now - start, 1e-6)
    if idle_start <= start:
        return 0.0
    return min(1.0, max(0.0, 1.0 - (idle_start - start) / elapsed))


class TrainerSide:
    """Trainer-process state: staleness of the batches taken, links to the rollouter windows that
    fed the step, and the live idle ratio (time waiting for samples in this version's window)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.trainer: Any = None
        self.queue_depth: float | None = None
        self.staleness_max: float | None = None
        self.staleness_mean: float | None = None
        self._pending: list[tuple[str, int]] = []
        self._cycle_version: float | None = None
        self._cycle_start = time.monotonic()
        self._waited = 0.0
        self._wait_since: float | None = None

    # -- waiting for samples ---------------------------------------------------------------------------
    def _roll_cycle_locked(self, now: float) -> None:
        version = _num(self.trainer, "current_param_version")
        if version != self._cycle_version:
            self._cycle_version, self._cycle_start, self._waited = version, now, 0.0

    def wait_started(self, trainer: Any) -> None:
        now = time.monotonic()
        with self._lock:
            self.trainer = trainer
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
            if self.trainer is None:
                return None
            self._roll_cycle_locked(now)
            waited = self._waited + (now - self._wait_since if self._wait_since is not None else 0.0)
            return min(1.0, waited / max(now - self._cycle_start, 1e-6))

    # -- the batch --------------------------------------------------------------------------------------
    def samples_assembled(self, rollout_samples: Sequence[Any]) -> None:
        tags = [getattr(rs, sc.ROLLOUT_SAMPLE_TRACE_ATTR, None) for rs in rollout_samples]
        with self._lock:
            self._pending = [t for t in tags if isinstance(t, tuple) and len(t) == 2]

    def batch_taken(self, trainer: Any, versions: Sequence[Any], step_span: Span | None) -> None:
        """verl collected the batch's metrics: staleness gauges and the step span's links."""
        current = _num(trainer, "current_param_version")
        with self._lock:
            self.trainer = trainer
            pending, self._pending = self._pending, []
        numbers = [_int(v) for v in versions]  # verl's object arrays: python or numpy ints
        stale = [current - v for v in numbers if v is not None] if current is not None else []
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
        version = _num(self.trainer, "current_param_version")
        if version is None:
            return None
        note = f"param version {int(version)}"
        if self.staleness_max is not None and self.staleness_mean is not None:
            note += f", staleness max {self.staleness_max:g} mean {self.staleness_mean:.2f}"
        return note

    # -- gauges -------------------------------------------------------------------------------------------
    def samples(self) -> Iterable[Sample]:
        version = _num(self.trainer, "current_param_version")
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
            for old in sorted(self._by_step)[:-self.KEEP]:
                del self._by_step[old]

    def consumed(self, step: int, tags: Sequence[Mapping[str, Any]], step_span: Span | None) -> None:
        """``tags``: verl's per-sample TransferQueue tags (global_steps = submitting step, max_global_steps =
        weights version that finished the sample)."""
        if step_span is None:
            return
        groups: dict[int, list[Any]] = {}
        for tag in tags:
            if isinstance(tag, Mapping) and not tag.get("is_padding", False):
                submit = _int(tag.get("global_steps"))
                if submit is not None and submit != step:  # the step's own samples need no link
                    groups.setdefault(submit, []).append(_int(tag.get("max_global_steps")))
        with self._lock:
            targets = {s: self._by_step.get(s) for s in groups}
        for submit in sorted(groups):
            ctx = targets[submit]
            if ctx is None:
                continue
            versions = [v for v in groups[submit] if isinstance(v, int)]
            attrs: dict[str, Any] = {sc.ATTR_GLOBAL_STEP: submit, sc.ATTR_ASYNC_SAMPLES: len(groups[submit])}
            if versions:
                # verl's training/off_policy/trajectory_staleness: (global_steps - 1) - max_global_steps, worst
                attrs[sc.ATTR_PARAM_VERSION] = min(versions)
                attrs[sc.ATTR_STALENESS] = (step - 1) - min(versions)
            step_span.add_link(ctx, attrs)


def _int(value: Any) -> int | None:
    """An integer from verl's tags (int, numpy or 0-d tensor), else None."""
    try:
        return operator.index(value)
    except TypeError:
        return None


def _span_context(traceparent: str) -> SpanContext | None:
    ctx = trace.get_current_span(extract(traceparent)).get_span_context()
    return ctx if ctx.is_valid else None


#: One of each per process (a process is either fully_async's rollouter or its trainer).
WINDOWS = RolloutWindows()
TRAINER_SIDE = TrainerSide()
SUBMITS = SubmitLinks()
