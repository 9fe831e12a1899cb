"""The carried trace context (verl_otel/telemetry/propagation.py) goes through ``opentelemetry.propagate``: a
context with tracestate and baggage comes back whole on the other side (a worker, a sample, vLLM's headers), a
plain one still travels as the bare W3C traceparent, the user's OTEL_PROPAGATORS is honoured, and one that cannot
load degrades to the W3C trace context with one line."""

from __future__ import annotations

import json

import pytest
from opentelemetry import baggage, propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import DefaultGetter, DefaultSetter, TextMapPropagator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from helpers.procs import clean_env, run_py

from verl_otel.telemetry import propagation
from verl_otel.telemetry.engine_context import sample_context

TRACE_ID, SPAN_ID = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331
TRACEPARENT = f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01"


def _ctx(state: TraceState | None = None, **bag: str) -> Context:
    span = SpanContext(TRACE_ID, SPAN_ID, is_remote=True, trace_flags=TraceFlags(1), trace_state=state)
    ctx = trace.set_span_in_context(NonRecordingSpan(span), Context())
    for key, value in bag.items():
        ctx = baggage.set_baggage(key, value, ctx)
    return ctx


def test_a_plain_context_travels_as_the_bare_traceparent():
    carried = propagation.inject(_ctx())
    assert carried == TRACEPARENT
    got = trace.get_current_span(propagation.extract(carried)).get_span_context()
    assert (got.trace_id, got.span_id, got.is_remote) == (TRACE_ID, SPAN_ID, True)


def test_tracestate_and_baggage_round_trip():
    state = TraceState([("vendor", "a=1;b"), ("rojo", "00f067aa0ba902b7")])
    carried = propagation.inject(_ctx(state, user="alice", run="exp 7,x=1"))
    assert carried is not None and carried.startswith(TRACEPARENT + propagation.SEP)
    ctx = propagation.extract(carried)
    got = trace.get_current_span(ctx).get_span_context()
    assert (got.trace_id, got.span_id) == (TRACE_ID, SPAN_ID)
    assert dict(got.trace_state) == dict(state)
    assert baggage.get_all(ctx) == {"user": "alice", "run": "exp 7,x=1"}
    # the phase a worker derives from it keeps both too (hooks/weight_sync.py)
    phase = propagation.phase_context(carried, "update_weights")
    assert phase is not None and dict(trace.get_current_span(phase).get_span_context().trace_state) == dict(state)
    assert baggage.get_all(phase) == {"user": "alice", "run": "exp 7,x=1"}


def test_a_samples_context_and_vllms_headers_keep_them():
    carried = propagation.inject(_ctx(TraceState([("vendor", "v")]), user="alice"))
    made = sample_context(carried)
    assert made is not None
    sample, span_id = made
    headers = propagation.to_headers(sample)
    assert headers["traceparent"] == f"00-{TRACE_ID:032x}-{span_id:016x}-01"
    assert headers["tracestate"] == "vendor=v" and headers["baggage"] == "user=alice"
    assert propagation.traceparent_of(sample) == headers["traceparent"]


class _Custom(TextMapPropagator):
    """A user's own propagator: one header of its own."""

    def inject(self, carrier, context=None, setter=DefaultSetter()):  # noqa: B008 -- the API's own default
        value = baggage.get_baggage("tenant", context)
        if value is not None:
            setter.set(carrier, "x-tenant", str(value))

    def extract(self, carrier, context=None, getter=DefaultGetter()):  # noqa: B008 -- the API's own default
        value = getter.get(carrier, "x-tenant")
        return baggage.set_baggage("tenant", value[0], context) if value else (context or Context())

    @property
    def fields(self):
        return {"x-tenant"}


@pytest.fixture
def custom_propagators():
    """OTEL_PROPAGATORS=tracecontext,<the user's> as the global propagator, restored afterwards."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    old = propagate.get_global_textmap()
    propagate.set_global_textmap(CompositePropagator([TraceContextTextMapPropagator(), _Custom()]))
    propagation._extract.cache_clear()
    yield
    propagate.set_global_textmap(old)
    propagation._extract.cache_clear()


def test_the_users_propagators_are_the_ones_used(custom_propagators):
    carried = propagation.inject(_ctx(TraceState([("vendor", "v")]), tenant="t1"))
    assert carried is not None
    headers = propagation.to_headers(carried)
    assert headers["x-tenant"] == "t1" and "baggage" not in headers and "tracestate" in headers
    ctx = propagation.extract(carried)
    assert baggage.get_baggage("tenant", ctx) == "t1"
    assert trace.get_current_span(ctx).get_span_context().span_id == SPAN_ID


def test_propagators_without_tracecontext_still_link_our_processes(tmp_path):
    """OTEL_PROPAGATORS=baggage: the user's headers travel, and our own processes still find the trace."""
    code = """
import json
from opentelemetry import baggage, trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from verl_otel.telemetry import propagation
ctx = trace.set_span_in_context(NonRecordingSpan(SpanContext(5, 6, True, TraceFlags(1))), Context())
carried = propagation.inject(baggage.set_baggage("k", "v", ctx))
back = propagation.extract(carried)
print(json.dumps([carried, trace.get_current_span(back).get_span_context().span_id, dict(baggage.get_all(back))]))
"""
    for value, bag in (("baggage", {"k": "v"}), ("nope", {})):
        proc = run_py(["-c", code], clean_env(OTEL_PROPAGATORS=value), tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        carried, span_id, got = json.loads(proc.stdout.splitlines()[-1])
        assert carried.startswith(f"00-{5:032x}-{6:016x}-01") and span_id == 6 and got == bag, proc.stdout
        warned = [line for line in proc.stderr.splitlines() if "OTEL_PROPAGATORS" in line]
        assert len(warned) == (value == "nope"), proc.stderr[-2000:]  # an unloadable one: said once
