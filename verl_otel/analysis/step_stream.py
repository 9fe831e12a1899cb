"""Step traces of a long run's trace file set, read in bounded memory: the file is streamed line by line and,
per trace, only what :func:`step_traces.build_step` reads is held (the step span; the phase candidates, worker
calls and weight syncs as a few values each; each ``rollout.worker``'s mode, index and median sample; the K slowest
``rollout.sample`` spans, as few attributes). The engine's ``llm_request`` spans are taken in a second pass
over only the lines that hold them, and only under the samples kept. Each trace's spans so reduced go through
``build_step``, so a step reads the same as from every span (its slowest K samples)."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path

from verl_otel import semconv as sc
from verl_otel.analysis import weight_sync_time as wsync
from verl_otel.analysis.otlp_json import FileRead, iter_file
from verl_otel.analysis.step_traces import Event, Span, StepTrace, build_step

_SAMPLE_ATTRS = (
    *(sc.ATTR_SAMPLE_INDEX, sc.ATTR_SAMPLE_ROLLOUT_N, sc.ATTR_SAMPLE_TOOLS_S, sc.ATTR_SAMPLE_SLOWEST_TOOL),
    *(sc.ATTR_SAMPLE_SLOWEST_TOOL_S, sc.ATTR_SAMPLE_SLOWEST_TOOL_CALLS, sc.ATTR_SAMPLE_SLOWEST_TOOL_TOTAL_S),
)
_ENGINE_ATTRS = (sc.ENGINE_ATTR_QUEUE, sc.ENGINE_ATTR_PREFILL, sc.ENGINE_ATTR_DECODE, sc.ATTR_ENGINE_REPLICA)
_WORKER_ATTRS = (sc.ATTR_MODE, sc.ATTR_WORKER_INDEX, sc.ATTR_WORKER_SAMPLE_MEDIAN_S, sc.ATTR_SAMPLES)
# what build_step reads of a phase (its tokens) or a worker call (its rank, for the stragglers)
_OTHER_ATTRS = (
    *(sc.ATTR_PHASE, sc.ATTR_PHASE_TOKENS, sc.ATTR_WORKER_RANK, sc.ATTR_WORKER_METHOD, sc.ATTR_WORKER_ROLE),
    *wsync.ATTRS,  # a weight sync's sides (weights.sync, weights.receive): their parts
    *(sc.ATTR_GENAI_TOOL_NAME, sc.ATTR_TOOL_OUTCOME),  # a tool call's (slow-steps --tools)
)
_NOT_PHASES = sc.NON_PHASE_SPANS | {sc.SPAN_ENGINE_REQUEST}
_ENGINE_NAME = f'"name":"{sc.SPAN_ENGINE_REQUEST}"'.encode()
_WORKER_CALLS = frozenset(sc.WORKER_SPAN_NAMES.values())  # worker.* spans: their ranks, for the stragglers
_SYNC_SIDES = frozenset((sc.SPAN_WEIGHT_SYNC, sc.SPAN_WEIGHT_RECEIVE))  # a weight sync's two sides: their parts


def _slim(span: Span, names: tuple[str, ...]) -> Span:
    """The span without events, links or resource (its host kept: analysis/clock.py), only the attributes ``names``."""
    attrs = {k: span.attributes[k] for k in names if k in span.attributes}
    return replace(span, attributes=attrs, events=(), links=(), resource=_host(span))


def _host(span: Span) -> dict[str, object]:
    host = span.resource.get(sc.RES_NODE)
    return {sc.RES_NODE: host} if host else {}


_Other = tuple[str, int, int, dict[str, object], str, str, dict[str, object], tuple[Event, ...]]


def _captures(span: Span) -> tuple[Event, ...]:
    """Its ``verl.capture`` events (slow-steps names the files), its other events left out."""
    return tuple(e for e in span.events if e.name == sc.EVENT_CAPTURE)[:4]


@dataclass
class _Trace:
    roots: dict[str, Span] = field(default_factory=dict)  # step spans without a parent (one, but for a re-export)
    # phase candidates and worker calls: span id -> (name, start, end, the attributes build_step reads, parent id,
    # service, host, its capture events)
    others: dict[str, _Other] = field(default_factory=dict)
    workers: dict[str, Span] = field(default_factory=dict)
    samples: list[tuple[int, int, Span]] = field(default_factory=list)  # min-heap of (duration, -seq, span)
    sample_ids: set[str] = field(default_factory=set)
    engine: dict[str, Span] = field(default_factory=dict)

    def spans(self, trace_id: str) -> list[Span]:
        out = [*self.roots.values(), *self.workers.values(), *(s for _, _, s in self.samples), *self.engine.values()]
        for span_id, (name, start, end, attrs, parent, service, host, events) in self.others.items():
            out.append(
                Span(trace_id, span_id, parent, name, start, end, attrs, service=service, resource=host, events=events)
            )
        return out


class StepFold:
    """Spans in, per-trace summaries held; :meth:`steps` the StepTraces (as ``build_steps`` gives them)."""

    def __init__(self, samples_kept: int) -> None:
        self.samples_kept = max(0, samples_kept)
        self.traces: dict[str, _Trace] = {}
        self.engine_seen = False
        self._seq = itertools.count()

    def add(self, span: Span) -> None:
        t = self.traces.get(span.trace_id)
        if t is None:
            t = self.traces[span.trace_id] = _Trace()
        name = span.name
        if name == sc.SPAN_STEP and not span.parent_id:
            t.roots[span.span_id] = replace(span, events=(), links=(), resource=_host(span))
        elif name == sc.SPAN_ROLLOUT_WORKER:
            t.workers[span.span_id] = _slim(span, _WORKER_ATTRS)
        elif name == sc.SPAN_ROLLOUT_SAMPLE:
            self._sample(t, span)
        elif name == sc.SPAN_ENGINE_REQUEST:
            self.engine_seen = True  # taken in the second pass, under the samples kept
        elif name not in _NOT_PHASES or name in _WORKER_CALLS or name in _SYNC_SIDES:
            attrs = {k: span.attributes[k] for k in _OTHER_ATTRS if k in span.attributes}
            t.others[span.span_id] = (
                name,
                span.start_ns,
                span.end_ns,
                attrs,
                span.parent_id,
                span.service,
                _host(span),
                _captures(span),
            )

    def _sample(self, t: _Trace, span: Span) -> None:
        if span.span_id in t.sample_ids or not self.samples_kept:
            return
        # ties go to the sample read first, as build_step's stable sort has them
        key = (span.end_ns - span.start_ns if span.end_ns > span.start_ns else 0, -next(self._seq))
        if len(t.samples) >= self.samples_kept:
            if key <= t.samples[0][:2]:
                return
            _, _, out = heapq.heapreplace(t.samples, (*key, _slim(span, _SAMPLE_ATTRS)))
            t.sample_ids.discard(out.span_id)
        else:
            heapq.heappush(t.samples, (*key, _slim(span, _SAMPLE_ATTRS)))
        t.sample_ids.add(span.span_id)

    def engine_only(self, raw: bytes) -> bool:
        """A line of an engine's export (every span in it an engine request, as our writer spells them): left
        for the second pass, unparsed in the first."""
        n = raw.count(_ENGINE_NAME)
        if n and n == raw.count(b'"spanId"'):
            self.engine_seen = True
            return True
        return False

    def add_engine(self, span: Span) -> None:
        t = self.traces.get(span.trace_id)
        if t is not None and span.name == sc.SPAN_ENGINE_REQUEST and span.parent_id in t.sample_ids:
            t.engine[span.span_id] = _slim(span, _ENGINE_ATTRS)

    def steps(self) -> list[StepTrace]:
        out = []
        for trace_id, t in self.traces.items():
            if not t.roots:
                continue
            step = build_step(t.spans(trace_id))
            if step is not None:
                out.append(step)
        out.sort(key=lambda st: (st.start_ns, st.global_step or 0))
        return out


def read_steps(path: Path | str, min_start_ns: int = 0, samples_kept: int = 3) -> tuple[list[StepTrace], FileRead]:
    """The step traces of a trace file set (each with its ``samples_kept`` slowest samples), and what reading
    skipped (``FileRead.spans`` stays empty). Raises OSError only for ``path`` itself."""
    got, fold = FileRead(), StepFold(samples_kept)
    for span in iter_file(path, min_start_ns, got, skip=fold.engine_only):
        fold.add(span)
    if fold.engine_seen:
        for span in iter_file(path, min_start_ns, FileRead(), sc.SPAN_ENGINE_REQUEST.encode()):
            fold.add_engine(span)
    return fold.steps(), got
