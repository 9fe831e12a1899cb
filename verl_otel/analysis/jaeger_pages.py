"""Jaeger's traces a page at a time, so a reader holds one answer, never the whole run.

Neither Jaeger API pages a search (no offset, no cursor): a search answers at most N traces of a time window, in
whatever order its storage keeps them (the memory store: newest written first). So the window is walked in slices,
newest first, each asked for at most N traces: an answer with fewer than N is the whole slice; an answer of N may
have left traces out, so it is dropped and the slice narrowed (to the traces per microsecond the answer shows, which
a storage that gave its newest shows in their spread of start times; at most 8 times) and asked again. The next
slice is sized from the traces per microsecond seen, for a little under N - 1 traces. N starts small, then follows
the traces' size, for answers of about ``page_bytes``. A trace is yielded once (a trace can match two searches). A
slice of one microsecond holding N or more traces cannot be split: its answer is taken as it is, and counted
(``Pages.crowded``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from verl_otel import semconv as sc
from verl_otel.analysis.jaeger import JaegerClient
from verl_otel.analysis.step_stream import StepFold
from verl_otel.analysis.step_summary import steps_from_summaries
from verl_otel.analysis.step_traces import Span, StepTrace

DEFAULT_PAGE_TRACES = 50  # at most this many traces in an answer
DEFAULT_PAGE_BYTES = 16 * 2**20  # fewer when the traces are large: answers of about this size
FIRST_PAGE_TRACES = 4  # before the traces' size is known
MIN_PAGE_TRACES = 2  # an answer of one trace would always be "full"
_GROW = 4.0  # the most a slice widens from one answer to the next (2 after an empty one, once traces were seen)


@dataclass
class Pages:
    """What a walk asked Jaeger for."""

    answers: int = 0
    largest_bytes: int = 0  # the largest answer's body
    traces: int = 0  # yielded
    asked_again: int = 0  # traces of full answers, dropped and asked again in narrower slices
    crowded: int = 0  # one-microsecond slices answered full: traces beyond the page may be missing


def walk(
    client: JaegerClient,
    service: str,
    start_ns: int,
    end_ns: int,
    operation: str,
    page_traces: int = DEFAULT_PAGE_TRACES,
    page_bytes: int = DEFAULT_PAGE_BYTES,
    seen: set[str] | None = None,
    stats: Pages | None = None,
) -> Iterator[list[Span]]:
    """The spans of every trace holding an ``operation`` span of ``service`` started in the window, one
    answer's worth at a time (each trace whole, once; ``seen`` its ids, shared to read several operations)."""
    seen = set() if seen is None else seen
    stats = Pages() if stats is None else stats
    page_traces = max(MIN_PAGE_TRACES, page_traces)
    limit = max(MIN_PAGE_TRACES, min(page_traces, FIRST_PAGE_TRACES))
    trace_bytes = 0  # the largest per-trace size seen in an answer
    rate = 0.0  # traces per µs lately seen (0: not yet)
    first, hi = start_ns // 1000, -(-end_ns // 1000)  # microseconds: the legacy API's unit, inclusive bounds
    width = hi - first + 1  # the first answer may be the whole window
    while hi >= first:
        lo = max(first, hi - width + 1)
        used = hi - lo + 1
        spans = client.find_traces(service, lo * 1000, hi * 1000 + 999, operation, limit)
        stats.answers += 1
        stats.largest_bytes = max(stats.largest_bytes, client.last_bytes)
        traces = {s.trace_id for s in spans}
        if traces:
            trace_bytes = max(trace_bytes, client.last_bytes // len(traces))
        # the traces' matching spans' starts in the slice (the legacy API's end rounded up: one µs more)
        starts = {
            s.trace_id: s.start_ns // 1000 for s in spans if s.name == operation and lo <= s.start_ns // 1000 <= hi + 1
        }
        if len(traces) > limit or not traces <= starts.keys():
            # a server that ignores the window or the limit (no Jaeger does): its answer is all there is
            stats.traces += len(traces - seen)
            yield [s for s in spans if s.trace_id not in seen]
            seen.update(traces)
            return
        full = len(traces) >= limit
        if full and used > 1:
            stats.asked_again += len(traces)
            spread = max(starts.values()) - min(starts.values()) + 1  # narrow when the storage gave its newest
            rate = max(rate, len(traces) / min(used, spread))
        else:
            stats.crowded += full
            new = [s for s in spans if s.trace_id not in seen]
            stats.traces += len(traces - seen)
            seen.update(traces)
            if new:
                yield new
            # an empty slice: the traces may be sparser from here on (before the run), or not (a gap)
            rate = len(traces) / used if traces else rate / 2
            hi = lo - 1
        if trace_bytes:
            limit = max(MIN_PAGE_TRACES, min(page_traces, page_bytes // trace_bytes))
        target = max(0.9, 0.8 * (limit - 1))  # a little short of a full answer, which is asked again
        if full and used > 1:
            # at most 8 times narrower: a spread of a few µs (traces started together) says little of the rest
            width = max(1, used // 8, min(used // 2, int(target / rate)))
        elif traces:
            width = max(1, int(min(used * _GROW, target / rate)))
        elif rate:  # an empty slice says nothing against its width
            width = max(used, int(min(used * 2, target / rate)))
        else:
            width = used * int(_GROW)


def steps(
    client: JaegerClient,
    service: str,
    start_ns: int,
    end_ns: int,
    operations: Iterable[str],
    samples_kept: int,
    stats: Pages | None = None,
    **page: int,
) -> list[StepTrace]:
    """The step traces of the window (each with its ``samples_kept`` slowest samples), read a page at a time
    into the file reader's per-trace summary (step_stream.StepFold): held is what it holds, and one answer."""
    fold, seen = StepFold(samples_kept), set[str]()
    for operation in operations:
        for spans in walk(client, service, start_ns, end_ns, operation, seen=seen, stats=stats, **page):
            _fold_whole(fold, spans)
    return fold.steps()


def _fold_whole(fold: StepFold, spans: list[Span]) -> None:
    """Whole traces' spans into ``fold``: the engine's requests last, once their traces' slowest samples are known."""
    engine = []
    for span in spans:
        if span.name == sc.SPAN_ENGINE_REQUEST:
            engine.append(span)
        else:
            fold.add(span)
    for span in engine:
        fold.add_engine(span)


SUMMARY_PAGE_TRACES = 500  # a summary's trace is one span (about 2 KB): answers of at most about 1 MB


def summaries(
    client: JaegerClient, service: str, start_ns: int, end_ns: int, stats: Pages | None = None
) -> list[StepTrace]:
    """The steps of the window from their summary spans (no step trace read): [] for a run written before
    summaries existed."""
    out: list[Span] = []
    for spans in walk(client, service, start_ns, end_ns, sc.SPAN_STEP_SUMMARY, SUMMARY_PAGE_TRACES, stats=stats):
        out += [s for s in spans if s.name == sc.SPAN_STEP_SUMMARY]
    return steps_from_summaries(out)


def whole(client: JaegerClient, steps: Iterable[StepTrace], samples_kept: int) -> dict[str, StepTrace]:
    """The steps given, each read from its whole trace (one trace an answer), by trace id; a step whose trace
    Jaeger no longer has is left out."""
    fold = StepFold(samples_kept)
    for step in steps:
        _fold_whole(fold, client.get_trace(step.trace_id))
    return {s.trace_id: s for s in fold.steps()}
