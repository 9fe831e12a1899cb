"""The trainer's trace context as a W3C ``traceparent`` string: what travels to other processes (in
verl's batches, hooks/verl_batches.py; in RolloutSample tags) and back into an OTel context."""

from __future__ import annotations

import functools
import hashlib

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()


def inject(ctx: otel_context.Context | None) -> str | None:
    """The W3C traceparent of ``ctx``, or None."""
    if ctx is None:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=ctx)
    return carrier.get("traceparent")


def extract(traceparent: str | None) -> otel_context.Context:
    if not traceparent:
        return otel_context.Context()
    return _extract(str(traceparent))


@functools.lru_cache(maxsize=64)
def _extract(traceparent: str) -> otel_context.Context:
    """Parsed once per traceparent (~7 µs): every sample of a batch carries its batch's (the stall watch reads it
    per sample). A Context is immutable, so one can be shared."""
    return _PROPAGATOR.extract({"traceparent": traceparent}, context=otel_context.Context())


def phase_span_id(trace_id: int, phase: str) -> int:
    """The span id the trainer gives ``phase``'s span in the step trace ``trace_id`` (its first run of it), so a
    worker that knows only the step's trace (a traced call's context) can put its part of the phase under it:
    verl's weight sync call carries no context of its own."""
    digest = hashlib.blake2b(f"{trace_id:032x}/{phase}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1


def phase_context(traceparent: str | None, phase: str) -> otel_context.Context | None:
    """The context of ``phase``'s span (see :func:`phase_span_id`) in the trace of ``traceparent``; None without
    a valid one."""
    parent = trace.get_current_span(extract(traceparent)).get_span_context()
    if not parent.is_valid:
        return None
    ctx = trace.SpanContext(
        parent.trace_id, phase_span_id(parent.trace_id, phase), is_remote=True, trace_flags=parent.trace_flags
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(ctx))
