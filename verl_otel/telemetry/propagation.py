"""The trainer's trace context as one string: what travels to other processes (in verl's batches,
hooks/verl_batches.py; in RolloutSample tags; into vLLM's ``trace_headers``) and back into an OTel context.

The string is the W3C ``traceparent`` (our own processes find each other by it, whatever the user's propagators),
followed by ``|`` and the other headers ``opentelemetry.propagate``'s global propagator writes (W3C
``tracestate`` and ``baggage`` by default, what ``OTEL_PROPAGATORS`` names otherwise), URL-encoded; a context
with none of those travels as the bare traceparent, as before. Extraction goes through the same global
propagator, so tracestate and baggage come back whole."""

from __future__ import annotations

import functools
import hashlib
import os
from types import ModuleType
from urllib.parse import parse_qsl, urlencode

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.environment_variables import OTEL_PROPAGATORS
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from verl_otel._log import warn_once

_W3C = TraceContextTextMapPropagator()  # the traceparent our processes match on, under any OTEL_PROPAGATORS
_TRACEPARENT = "traceparent"
SEP = "|"  # never in a traceparent


@functools.cache
def _propagate() -> ModuleType | None:
    """``opentelemetry.propagate``, whose import loads OTEL_PROPAGATORS' propagators and raises on a name it cannot
    load: then only the W3C trace context travels, said in one line."""
    try:
        from opentelemetry import propagate

        return propagate
    except Exception as exc:  # noqa: BLE001 -- ValueError for an unknown name, anything a propagator's import raises
        warn_once(
            "propagators",
            f"{OTEL_PROPAGATORS}={os.environ.get(OTEL_PROPAGATORS, '')!r} cannot be loaded ({exc}): "
            "only the W3C trace context travels",
        )
        return None


def headers(ctx: otel_context.Context) -> dict[str, str]:
    """Every header of ``ctx``: the global propagator's (OTEL_PROPAGATORS) and the W3C traceparent."""
    carrier: dict[str, str] = {}
    propagate = _propagate()
    if propagate is not None:
        propagate.inject(carrier, context=ctx)
    if _TRACEPARENT not in carrier:
        _W3C.inject(carrier, context=ctx)
    return carrier


def inject(ctx: otel_context.Context | None) -> str | None:
    """The carried string of ``ctx`` (module doc), or None when it has no valid span."""
    if ctx is None:
        return None
    carrier = headers(ctx)
    traceparent = carrier.pop(_TRACEPARENT, None)
    if traceparent is None:
        return None
    return f"{traceparent}{SEP}{urlencode(sorted(carrier.items()))}" if carrier else traceparent


def traceparent_of(carried: str) -> str:
    """The W3C traceparent part of a carried string."""
    return carried.split(SEP, 1)[0]


def to_headers(carried: str) -> dict[str, str]:
    """The headers a carried string stands for (vLLM's ``trace_headers``, an extract's carrier)."""
    head, _, rest = carried.partition(SEP)
    return {**dict(parse_qsl(rest, keep_blank_values=True)), _TRACEPARENT: head}


def extract(traceparent: str | None) -> otel_context.Context:
    if not traceparent:
        return otel_context.Context()
    return _extract(str(traceparent))


@functools.lru_cache(maxsize=64)
def _extract(carried: str) -> otel_context.Context:
    """Parsed once per carried string: every sample of a batch carries its batch's (the stall watch reads it per
    sample). A Context is immutable, so one can be shared."""
    carrier = to_headers(carried)
    propagate = _propagate()
    ctx = otel_context.Context() if propagate is None else propagate.extract(carrier, context=otel_context.Context())
    if not trace.get_current_span(ctx).get_span_context().is_valid:  # OTEL_PROPAGATORS without tracecontext
        ctx = _W3C.extract(carrier, context=ctx)
    return ctx


def phase_span_id(trace_id: int, phase: str) -> int:
    """The span id the trainer gives ``phase``'s span in the step trace ``trace_id`` (its first run of it), so a
    worker that knows only the step's trace (a traced call's context) can put its part of the phase under it:
    verl's weight sync call carries no context of its own."""
    digest = hashlib.blake2b(f"{trace_id:032x}/{phase}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1


def phase_context(traceparent: str | None, phase: str) -> otel_context.Context | None:
    """The context of ``phase``'s span (see :func:`phase_span_id`) in the trace of ``traceparent``; None without
    a valid one."""
    carried = extract(traceparent)
    parent = trace.get_current_span(carried).get_span_context()
    if not parent.is_valid:
        return None
    ctx = trace.SpanContext(
        parent.trace_id,
        phase_span_id(parent.trace_id, phase),
        is_remote=True,
        trace_flags=parent.trace_flags,
        trace_state=parent.trace_state,
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(ctx), carried)  # the baggage kept
