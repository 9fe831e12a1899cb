"""Validation generations as verl-otel records them, written by the OTel SDK: the spans the val-generations
tests read back (from the trace file, and from Jaeger's answers)."""

from __future__ import annotations

from opentelemetry import context as otel_context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from verl_otel import semconv as sc

S = 10**9
GSM8K = "openai/gsm8k"


def sdk_validations(t0_ns: int) -> list:
    """What verl-otel records: the validation before training (step 0), step 2's with text (one cut),
    step 4's over two data sources, and a fully_async rollouter validation (by parameter version)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "verl"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer(sc.INSTRUMENTATION_NAME)

    def validation(step: int, t: int, samples: list[dict], sources: list[str]) -> None:
        root = tracer.start_span(
            sc.SPAN_STEP, context=otel_context.Context(), start_time=t, attributes={sc.ATTR_GLOBAL_STEP: step}
        )
        span = tracer.start_span(
            sc.PHASE_VALIDATE,
            context=set_span_in_context(root),
            start_time=t + S,
            attributes={sc.ATTR_PHASE: sc.PHASE_VALIDATE},
        )
        span.set_attribute(sc.ATTR_VAL_GENERATIONS, len(samples))
        if sources:
            span.set_attribute(sc.ATTR_VAL_DATA_SOURCES, sources)
        for i, attrs in enumerate(samples):
            span.add_event(sc.EVENT_VAL_GENERATION, attrs, timestamp=t + 2 * S + i)
        span.end(end_time=t + 3 * S)
        root.end(end_time=t + 4 * S)

    validation(0, t0_ns, [{sc.ATTR_VAL_SCORE: 0.0}, {sc.ATTR_VAL_SCORE: 1.0}], [GSM8K])
    validation(
        2,
        t0_ns + 60 * S,
        [
            {
                sc.ATTR_VAL_SCORE: 1.0,
                sc.ATTR_VAL_INPUT: "what is 2 plus 2 ?\nthink",
                sc.ATTR_VAL_OUTPUT: "4 #### 4",
                sc.ATTR_VAL_TRUNCATED: False,
            },
            {
                sc.ATTR_VAL_SCORE: 0.0,
                sc.ATTR_VAL_INPUT: "how many apples",
                sc.ATTR_VAL_OUTPUT: "tom has",
                sc.ATTR_VAL_TRUNCATED: True,
            },
        ],
        [GSM8K],
    )
    validation(4, t0_ns + 120 * S, [{sc.ATTR_VAL_SCORE: 0.5}], [GSM8K, "math"])
    roll = tracer.start_span(
        sc.SPAN_ROLLOUTER_VALIDATE,
        context=otel_context.Context(),
        start_time=t0_ns + 180 * S,
        attributes={sc.ATTR_PARAM_VERSION: 5, sc.ATTR_PHASE: sc.PHASE_VALIDATE},
    )
    roll.add_event(sc.EVENT_VAL_GENERATION, {sc.ATTR_VAL_SCORE: 1.0}, timestamp=t0_ns + 181 * S)
    roll.end(end_time=t0_ns + 182 * S)
    provider.shutdown()
    return list(exporter.get_finished_spans())
