"""The tests' one reader of spans: the CLI's own parser (``verl_otel.analysis.otlp_json``), so a test sees
what `verl-otel slow-steps` and `val-generations` read. Spans are ``verl_otel.analysis.step_traces.Span``: ids in
lowercase hex, attributes, resource attributes (``span.resource``), events with their attributes, links with
theirs, ``status_error``.

    load_spans(path)          # traces.jsonl and the files it rotated into; a malformed line fails the test
    spans_of_request(req)     # an OTLP ExportTraceServiceRequest (protobuf, as a collector receives it)
    steps(spans)              # global step -> StepTree(root, spans of its trace)
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

from google.protobuf.json_format import MessageToDict

from verl_otel.analysis.otlp_json import parse_request, read_file
from verl_otel.analysis.step_traces import Span


def load_spans(path: Path | str) -> list[Span]:
    """Every span of a traces.jsonl and its rotated files, oldest file first."""
    read = read_file(path)
    assert read.malformed == 0, f"{read.malformed} malformed line(s) in {path}"
    return read.spans


def spans_of_request(request: Any) -> list[Span]:
    """The spans of one protobuf ExportTraceServiceRequest (protobuf's JSON mapping: base64 ids, which the
    parser reads as well as OTLP/JSON's hex)."""
    return parse_request(MessageToDict(request))


def event_names(span: Span) -> list[str]:
    return [e.name for e in span.events]


class StepTree(NamedTuple):
    root: Span  # the trace's ``step`` span
    spans: list[Span]  # every span of the trace, the root included


def steps(spans: list[Span]) -> dict[int, StepTree]:
    """global step -> its trace (traces with exactly one ``step`` root)."""
    by_trace: dict[str, list[Span]] = defaultdict(list)
    for sp in spans:
        by_trace[sp.trace_id].append(sp)
    out = {}
    for trace in by_trace.values():
        roots = [s for s in trace if s.name == "step" and not s.parent_id]
        if len(roots) != 1:
            continue
        root = roots[0]
        out[root.attributes["verl.global_step"]] = StepTree(root, trace)
    return out


def parent_chain(span: Span, spans: list[Span]) -> list[str]:
    """The names from ``span`` up to its trace's root (``<missing>`` where a parent is not in ``spans``)."""
    by_id = {s.span_id: s for s in spans}
    chain = [span.name]
    cur: Span | None = span
    while cur is not None and cur.parent_id:
        cur = by_id.get(cur.parent_id)
        if cur is None:
            chain.append("<missing>")
            break
        chain.append(cur.name)
    return chain


def step_tokens(tree: StepTree) -> tuple[int, int]:
    """The step span's (prompt, response) tokens, checked against its phase spans: each token phase of the step
    carries them (rollout the responses, the others both) with its seconds per 1k of them; adv carries none."""
    from verl_otel import semconv as sc

    prompt = tree.root.attributes[sc.ATTR_STEP_PROMPT_TOKENS]
    response = tree.root.attributes[sc.ATTR_STEP_RESPONSE_TOKENS]
    assert prompt > 0 and response > 0, tree.root.attributes
    phases = [s for s in tree.spans if s.name in sc.TOKEN_PHASES and s.attributes.get(sc.ATTR_PHASE) == s.name]
    assert any(s.name == sc.PHASE_ROLLOUT for s in phases), [s.name for s in tree.spans]
    for s in phases:
        want = response if s.name in sc.GENERATING_PHASES else prompt + response
        assert s.attributes[sc.ATTR_PHASE_TOKENS] == want, (s.name, s.attributes)
        # the phase's own seconds (the tracer's clock, not the span's stamps): 5% or a millisecond apart at most
        seconds = s.attributes[sc.ATTR_PHASE_S_PER_1K_TOKENS] * want / 1000
        assert abs(seconds - s.seconds) <= 0.05 * s.seconds + 1e-3, (s.name, s.attributes, s.seconds)
    for s in tree.spans:
        if s.name == sc.PHASE_ADV:
            assert sc.ATTR_PHASE_TOKENS not in s.attributes, s.attributes
    return prompt, response
