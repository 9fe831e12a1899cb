"""Steps read from their summary spans (``step.summary``, telemetry/step_summary.py): what ranks and compares
steps (the step's time, its phases' seconds, runs and tokens, the step span's attributes) without its trace."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis.step_traces import Span, StepTrace, as_float, as_int

_OWN = frozenset(
    {
        sc.ATTR_SUMMARY_TRACE_ID,
        sc.ATTR_SUMMARY_PHASES,
        sc.ATTR_SUMMARY_PHASE_SECONDS,
        sc.ATTR_SUMMARY_PHASE_RUNS,
        sc.ATTR_SUMMARY_PHASE_TOKENS,
        sc.ATTR_SUMMARY_ERROR,
    }
)


def _array(value: Any) -> list[Any]:
    """An array attribute: a list (OTLP), or the JSON text Jaeger's legacy API turns an array tag into."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return list(value) if isinstance(value, list | tuple) else []


def from_summary(span: Span) -> StepTrace | None:
    """The step a summary span describes; None for another span, a summary without its step's trace id, or
    fully_async's stopped step (nothing trained)."""
    attrs = span.attributes
    trace_id = str(attrs.get(sc.ATTR_SUMMARY_TRACE_ID) or "").lower()
    if span.name != sc.SPAN_STEP_SUMMARY or len(trace_id) != 32:
        return None
    if str(attrs.get(sc.ATTR_STOPPED)).lower() == "true":
        return None
    number = as_int(attrs.get(sc.ATTR_GLOBAL_STEP))
    step = StepTrace(
        trace_id,
        number if number is not None and number >= 0 else None,
        span.start_ns,
        span.seconds,
        span.service,
        span.status_error or str(attrs.get(sc.ATTR_SUMMARY_ERROR)).lower() == "true",
        attributes={k: v for k, v in attrs.items() if k not in _OWN},
        summarized=True,
    )
    names = _array(attrs.get(sc.ATTR_SUMMARY_PHASES))
    seconds = _array(attrs.get(sc.ATTR_SUMMARY_PHASE_SECONDS))
    runs = _array(attrs.get(sc.ATTR_SUMMARY_PHASE_RUNS))
    tokens = _array(attrs.get(sc.ATTR_SUMMARY_PHASE_TOKENS))
    for i, name in enumerate(names):
        s = as_float(seconds[i]) if i < len(seconds) else None
        if not isinstance(name, str) or s is None:
            continue  # arrays that do not line up: the phase is left out, not guessed
        step.phases[name] = step.phases.get(name, 0.0) + s
        step.phase_runs[name] = step.phase_runs.get(name, 0) + ((as_int(runs[i]) or 1) if i < len(runs) else 1)
        t = as_int(tokens[i]) if i < len(tokens) else None
        if t:
            step.tokens[name] = step.tokens.get(name, 0) + t
    return step


def steps_from_summaries(spans: Iterable[Span]) -> list[StepTrace]:
    """One StepTrace per step summarized (a summary exported twice counts once), oldest first."""
    by_trace: dict[str, StepTrace] = {}
    for span in spans:
        step = from_summary(span)
        if step is not None:
            by_trace.setdefault(step.trace_id, step)
    return sorted(by_trace.values(), key=lambda st: (st.start_ns, st.global_step or 0))


__all__ = ["from_summary", "steps_from_summaries"]
