"""Validation generations read back from traces: the ``verl.val_generation`` events verl-otel puts on
``validate`` spans (fully_async: ``rollouter.validate``), with the step they belong to, newest first."""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis.step_traces import Span, as_int

VALIDATE_SPANS = (sc.PHASE_VALIDATE, sc.SPAN_ROLLOUTER_VALIDATE)


@dataclass(frozen=True)
class Generation:
    step: int | None  # None: fully_async's rollouter validates by parameter version, not step
    score: float | None
    data_source: str | None  # the validation's only data source; None when it scored several
    data_sources: list[str] = field(default_factory=list)
    prompt: str | None = None  # only with VERL_OTEL_CAPTURE_TEXT=1
    response: str | None = None
    truncated: bool | None = None
    param_version: int | None = None
    time_ns: int = 0
    trace_id: str = ""
    service: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _step_of(span: Span, roots: dict[str, Span]) -> int | None:
    for source in (span, roots.get(span.trace_id)):
        if source is not None:
            n = as_int(source.attributes.get(sc.ATTR_GLOBAL_STEP))
            if n is not None and n >= 0:
                return n
    return None


def needed(span: Span) -> Span | None:
    """What :func:`generations` reads of a span: a validation span whole, a root's step number; else nothing
    (a trace file reader holds only these)."""
    if span.name in VALIDATE_SPANS:
        return span
    if not span.parent_id:
        step = span.attributes.get(sc.ATTR_GLOBAL_STEP)
        return replace(span, attributes={} if step is None else {sc.ATTR_GLOBAL_STEP: step}, events=(), links=())
    return None


def generations(spans: Iterable[Span]) -> list[Generation]:
    """Every validation generation of the spans, newest validation first (a validation's samples in
    the order verl logged them). Holds only the validation spans and each trace's root while reading."""
    validations: dict[tuple[str, str], Span] = {}  # a span exported twice counts once
    roots: dict[str, Span] = {}
    for s in spans:
        if not s.parent_id:
            roots[s.trace_id] = s
        if s.name in VALIDATE_SPANS:
            validations[(s.trace_id, s.span_id)] = s
    by_span: dict[tuple[int, str, str], list[Generation]] = defaultdict(list)  # (start, trace, span)
    for span in validations.values():
        sources = _sources(span.attributes.get(sc.ATTR_VAL_DATA_SOURCES))
        for ev in span.events:
            if ev.name != sc.EVENT_VAL_GENERATION:
                continue
            a = ev.attributes
            score = a.get(sc.ATTR_VAL_SCORE)
            by_span[(span.start_ns, span.trace_id, span.span_id)].append(
                Generation(
                    step=_step_of(span, roots),
                    score=float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
                    data_source=sources[0] if len(sources) == 1 else None,
                    data_sources=sources,
                    prompt=_opt_str(a.get(sc.ATTR_VAL_INPUT)),
                    response=_opt_str(a.get(sc.ATTR_VAL_OUTPUT)),
                    truncated=a.get(sc.ATTR_VAL_TRUNCATED) if isinstance(a.get(sc.ATTR_VAL_TRUNCATED), bool) else None,
                    param_version=as_int(span.attributes.get(sc.ATTR_PARAM_VERSION)),
                    time_ns=ev.time_ns or span.start_ns,
                    trace_id=span.trace_id,
                    service=span.service,
                )
            )
    out: list[Generation] = []
    for key in sorted(by_span, reverse=True):
        out += by_span[key]
    return out


def _sources(raw: Any) -> list[str]:
    """A string-array attribute; Jaeger's legacy API gives arrays as JSON text."""
    if isinstance(raw, str) and raw.startswith("["):
        with contextlib.suppress(ValueError):  # not JSON after all: kept as one string
            raw = json.loads(raw)
    if isinstance(raw, list):
        return [str(x) for x in raw]
    return [str(raw)] if raw else []


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
