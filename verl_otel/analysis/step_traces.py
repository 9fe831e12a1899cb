"""A backend-neutral view of step traces: spans (from a file or Jaeger), grouped into one StepTrace
per trainer step, with its phases summed and its rollout samples slowest first."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis import clock
from verl_otel.analysis.tools import SampleTools, sample_tools, tool_call
from verl_otel.analysis.weight_sync_time import ReceiveParts, SyncParts, from_span, receive_from_span

_NOT_PHASES = sc.NON_PHASE_SPANS


@dataclass(frozen=True, slots=True)
class Event:
    """A span event (e.g. a validation generation)."""

    name: str
    time_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Link:
    """A span link: the span it points at, with the link's own attributes (fully_async: a step's link to
    each rollouter window whose samples it trained on)."""

    trace_id: str  # 32 lowercase hex digits
    span_id: str  # 16 lowercase hex digits
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Span:
    trace_id: str  # 32 lowercase hex digits
    span_id: str  # 16 lowercase hex digits
    parent_id: str  # "" for a root
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    status_error: bool = False
    service: str = ""
    events: tuple[Event, ...] = ()
    links: tuple[Link, ...] = ()
    resource: dict[str, Any] = field(default_factory=dict)  # the resource's attributes (``service`` is one)

    @property
    def seconds(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9


@dataclass(frozen=True, slots=True)
class EngineTime:
    """Where a sample's inference-engine requests spent their time (vLLM's ``llm_request`` spans under it)."""

    requests: int
    queue_s: float
    prefill_s: float
    decode_s: float
    replica: int | None = None


def engine_time(spans: list[Span]) -> EngineTime | None:
    if not spans:
        return None

    def total(attr: str) -> float:
        return sum(float(s.attributes.get(attr) or 0.0) for s in spans)

    replicas = {as_int(s.attributes.get(sc.ATTR_ENGINE_REPLICA)) for s in spans} - {None}
    return EngineTime(
        len(spans),
        total(sc.ENGINE_ATTR_QUEUE),
        total(sc.ENGINE_ATTR_PREFILL),
        total(sc.ENGINE_ATTR_DECODE),
        replicas.pop() if len(replicas) == 1 else None,
    )


@dataclass(frozen=True, slots=True)
class Sample:
    """One ``rollout.sample`` span of a step."""

    index: int | None
    seconds: float
    worker: int | None
    error: bool = False
    rollout_n: int | None = None  # which of the prompt's n responses (the index repeats across them)
    mode: str | None = None  # train / validate (validation samples live in the step's trace too)
    engine: EngineTime | None = None  # its engine requests (vLLM rollout with engine spans), summed
    end_ns: int = 0
    tools: SampleTools | None = None  # an agent loop's: its slowest tool (analysis/tools.py)


@dataclass
class StepTrace:
    trace_id: str
    global_step: int | None  # None when the step span does not say
    start_ns: int
    seconds: float
    service: str
    error: bool
    phases: dict[str, float] = field(default_factory=dict)  # summed: a phase may run several times a step
    phase_runs: dict[str, int] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)  # slowest first
    tool_calls: list[tuple[str, float, str]] = field(default_factory=list)  # (tool, seconds, outcome) spanned
    tokens: dict[str, int] = field(default_factory=dict)  # phase -> tokens it handled (summed over its runs)
    worker_medians: list[float] = field(default_factory=list)  # each training rollout.worker's median sample, s
    #: (phase, worker.* span name, role) -> rank -> seconds of its calls (summed over the step)
    rank_calls: dict[tuple[str, str, str], dict[int, float]] = field(default_factory=dict)
    weight_syncs: list[SyncParts] = field(default_factory=list)  # each worker's side of the step's weight syncs
    weight_receives: list[ReceiveParts] = field(default_factory=list)  # each rollout replica's side of them
    attributes: dict[str, Any] = field(default_factory=dict)  # the step span's own (trainer, config values, ...)
    sample_count: int = 0  # training samples its rollout.worker spans say they handled (0: none say)
    #: hosts whose clock disagreed with the step's host (analysis/clock.py): host -> seconds added to its times
    clock_offsets: dict[str, float] = field(default_factory=dict)
    #: (span name, file, tool) of the captures taken in the step: a stalled call's sampling profile, verl's own
    #: profiler armed by a stall of the step before (``verl.capture`` events on the spans)
    captures: list[tuple[str, str, str]] = field(default_factory=list)
    #: read from the step's summary span (analysis/step_summary.py): phases, tokens and attributes only, no
    #: samples, worker calls or weight syncs until its whole trace is read
    summarized: bool = False

    @property
    def clock_skew_s(self) -> float:
        """The largest clock offset between the step's hosts (0.0: none past the tolerance)."""
        return max((abs(v) for v in self.clock_offsets.values()), default=0.0)


def as_int(value: Any) -> int | None:
    """An int attribute, whichever way the backend typed it (int, "12", 12.0); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return int(f) if f.is_integer() else None


def as_float(value: Any) -> float | None:
    """A number attribute, whichever way the backend typed it; else None."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _is_phase(span: Span, root: Span) -> bool:
    # Our phase spans carry verl.phase (they may nest, e.g. a phase inside rollout); for traces made
    # by other producers, fall back to "a direct child of the step span".
    if span is root or span.name in _NOT_PHASES:
        return False
    return sc.ATTR_PHASE in span.attributes or span.parent_id == root.span_id


def build_step(trace: list[Span]) -> StepTrace | None:
    """The StepTrace of one trace's spans, or None if the trace has no ``step`` root (or a stopped one)."""
    unique = list({s.span_id: s for s in trace}.values())  # a span exported twice counts once
    roots = sorted((s for s in unique if s.name == sc.SPAN_STEP and not s.parent_id), key=lambda s: s.start_ns)
    if not roots:
        return None
    root = roots[0]
    if str(root.attributes.get(sc.ATTR_STOPPED)).lower() == "true":
        return None  # fully_async's stop: the queue had closed, nothing trained (it would skew the medians)
    number = as_int(root.attributes.get(sc.ATTR_GLOBAL_STEP))
    step = StepTrace(
        root.trace_id,
        number if number is not None and number >= 0 else None,
        root.start_ns,
        root.seconds,
        root.service,
        root.status_error,
        attributes=dict(root.attributes),
    )
    workers = {s.span_id: s.attributes for s in unique if s.name == sc.SPAN_ROLLOUT_WORKER}
    for attrs in workers.values():
        median = as_float(attrs.get(sc.ATTR_WORKER_SAMPLE_MEDIAN_S))
        train = attrs.get(sc.ATTR_MODE) in (None, sc.MODE_TRAIN)
        if median is not None and train:
            step.worker_medians.append(median)
        if train:
            step.sample_count += as_int(attrs.get(sc.ATTR_SAMPLES)) or 0
    requests: dict[str, list[Span]] = defaultdict(list)
    for s in unique:
        if s.name == sc.SPAN_ENGINE_REQUEST:
            requests[s.parent_id].append(s)
    by_id = {s.span_id: s for s in unique}
    shift = clock.offsets(unique)  # cross-host times are compared aligned; durations stay as measured
    step.clock_offsets = {host: ns / 1e9 for host, ns in shift.items()}
    for s in unique:
        step.captures += [
            (s.name, str(e.attributes.get(sc.ATTR_CAPTURE_FILE, "")), str(e.attributes.get(sc.ATTR_CAPTURE_TOOL, "")))
            for e in s.events
            if e.name == sc.EVENT_CAPTURE
        ]
        if s.name in _WORKER_CALLS:
            _add_rank_call(step, s, by_id.get(s.parent_id))
        elif s.name == sc.SPAN_WEIGHT_SYNC:
            step.weight_syncs.append(from_span(s.attributes, s.seconds))
        elif s.name == sc.SPAN_WEIGHT_RECEIVE:
            step.weight_receives.append(receive_from_span(s.attributes, s.seconds))
        elif s.name == sc.SPAN_ROLLOUT_SAMPLE:
            worker = workers.get(s.parent_id, {})
            mode = worker.get(sc.ATTR_MODE)
            step.samples.append(
                Sample(
                    as_int(s.attributes.get(sc.ATTR_SAMPLE_INDEX)),
                    s.seconds,
                    as_int(worker.get(sc.ATTR_WORKER_INDEX)),
                    s.status_error,
                    as_int(s.attributes.get(sc.ATTR_SAMPLE_ROLLOUT_N)),
                    None if mode is None else str(mode),
                    engine_time(requests.get(s.span_id, [])),
                    s.end_ns + shift.get(clock.host_of(s), 0),
                    sample_tools(s.attributes),
                )
            )
        elif (call := tool_call(s.name, s.attributes, s.seconds)) is not None:
            step.tool_calls.append(call)
        elif _is_phase(s, root):
            step.phases[s.name] = step.phases.get(s.name, 0.0) + s.seconds
            step.phase_runs[s.name] = step.phase_runs.get(s.name, 0) + 1
            tokens = as_int(s.attributes.get(sc.ATTR_PHASE_TOKENS))
            if tokens is not None and tokens > 0:
                step.tokens[s.name] = step.tokens.get(s.name, 0) + tokens
    step.samples.sort(key=lambda x: x.seconds, reverse=True)
    return step


_WORKER_CALLS = frozenset(sc.WORKER_SPAN_NAMES.values())


def _add_rank_call(step: StepTrace, span: Span, parent: Span | None) -> None:
    rank = as_int(span.attributes.get(sc.ATTR_WORKER_RANK))
    if rank is None:
        return
    method = str(span.attributes.get(sc.ATTR_WORKER_METHOD, ""))
    phase = parent.name if parent is not None and sc.ATTR_PHASE in parent.attributes else None
    key = (
        phase or sc.WORKER_METHOD_PHASES.get(method, method),
        span.name,
        str(span.attributes.get(sc.ATTR_WORKER_ROLE, "")),
    )
    ranks = step.rank_calls.setdefault(key, {})
    ranks[rank] = ranks.get(rank, 0.0) + span.seconds


def build_steps(spans: Iterable[Span]) -> list[StepTrace]:
    """One StepTrace per trace whose root is a ``step`` span, oldest first."""
    by_trace: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    out = [st for st in map(build_step, by_trace.values()) if st is not None]
    out.sort(key=lambda st: (st.start_ns, st.global_step or 0))
    return out
