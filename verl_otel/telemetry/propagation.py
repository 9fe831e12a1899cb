"""The trainer's trace context as a W3C ``traceparent`` string: what travels to other processes (in
verl's batches, hooks/verl_batches.py; in RolloutSample tags) and back into an OTel context."""

from __future__ import annotations

from opentelemetry import context as otel_context
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
    return _PROPAGATOR.extract({"traceparent": str(traceparent)}, context=otel_context.Context())
