"""The step summary (``step.summary``): one small span per step, the root of its own trace, written when the step
span ends. Jaeger's search answers whole traces; a step's is hundreds of spans, its summary one. A reader of a long
run ranks the steps from their summaries and fetches only the traces it shows (analysis/step_summary.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, StatusCode

from verl_otel import semconv as sc
from verl_otel._log import logger
from verl_otel.telemetry.open_step import _Step


def summary_attributes(
    step_attributes: Mapping[str, Any],
    trace_id: int,
    phases: Mapping[str, float],
    runs: Mapping[str, int],
    tokens: Mapping[str, int],
    error: bool,
) -> dict[str, Any]:
    """The step span's attributes, with its phases as aligned arrays (an attribute value cannot be a map)."""
    names = list(phases)
    return {
        **step_attributes,
        sc.ATTR_SUMMARY_TRACE_ID: format(trace_id, "032x"),
        sc.ATTR_SUMMARY_PHASES: names,
        sc.ATTR_SUMMARY_PHASE_SECONDS: [float(phases[n]) for n in names],
        sc.ATTR_SUMMARY_PHASE_RUNS: [int(runs.get(n, 1)) for n in names],
        sc.ATTR_SUMMARY_PHASE_TOKENS: [int(tokens.get(n, 0)) for n in names],
        sc.ATTR_SUMMARY_ERROR: error,
    }


def write_summary(tracer: trace.Tracer, span: Any, step: _Step) -> None:
    """The summary of ``step``, whose span has just ended: the same start and end, a link to it. A span that
    recorded nothing (spans off, or not sampled) has no summary. Never raises: the caller ends a step."""
    try:
        end = getattr(span, "end_time", None)
        if end is None or not span.get_span_context().is_valid:
            return
        status = getattr(span, "status", None)
        error = step.error or (status is not None and status.status_code is StatusCode.ERROR)
        attrs = summary_attributes(
            dict(getattr(span, "attributes", None) or {}),
            span.get_span_context().trace_id,
            step.phases,
            step.runs,
            step.phase_tokens,
            error,
        )
        summary = tracer.start_span(
            sc.SPAN_STEP_SUMMARY,
            context=otel_context.Context(),  # a root: a search for it answers this one span
            links=[Link(span.get_span_context())],
            start_time=span.start_time,
            attributes=attrs,
        )
        summary.end(end_time=end)
    except Exception as exc:  # noqa: BLE001 - a summary is never worth a step
        logger.debug("step summary not written: %s", exc)


__all__ = ["summary_attributes", "write_summary"]
