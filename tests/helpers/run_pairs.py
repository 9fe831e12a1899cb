"""Two runs to compare (``verl-otel compare``), written by the OTel SDK as verl-otel records them: step 0
(validation only), then training steps whose phase times, tokens and step span attributes the test chooses."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from verl_otel import semconv as sc

S = 10**9
BASE_PHASES = {
    sc.PHASE_ROLLOUT: 2.0,
    sc.PHASE_OLD_LOG_PROB: 0.5,
    sc.PHASE_ADV: 0.002,
    sc.PHASE_UPDATE_WEIGHTS: 0.1,
    sc.PHASE_UPDATE_ACTOR: 1.0,
}
TOKENS = 4000  # per token phase and step


def jitter(seed: int, spread: float = 0.03) -> Callable[[str, int], float]:
    """A step's factor on each phase: uniform in 1 +- spread, drawn from ``seed``."""
    rng = random.Random(seed)
    table: dict[tuple[str, int], float] = {}

    def factor(phase: str, step: int) -> float:
        key = (phase, step)
        if key not in table:
            table[key] = 1.0 + rng.uniform(-spread, spread)
        return table[key]

    return factor


def run_spans(
    t0_ns: int,
    steps: int = 8,
    phases: Mapping[str, float] = BASE_PHASES,
    noise: Callable[[str, int], float] | None = None,
    attrs: Mapping[str, Any] | None = None,
    samples: int = 8,
) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": sc.SERVICE_NAME_DEFAULT}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer(sc.INSTRUMENTATION_NAME)
    step_attrs = {sc.ATTR_TRAINER: sc.TRAINER_V1, sc.ATTR_ROLLOUT_N: 2, **(attrs or {})}
    noise = noise or jitter(1)
    t = t0_ns
    for step in range(steps + 1):
        todo = {sc.PHASE_VALIDATE: 3.0} if step == 0 else {p: d * noise(p, step) for p, d in phases.items()}
        extra = {sc.ATTR_STEP_PROMPT_TOKENS: TOKENS // 2, sc.ATTR_STEP_RESPONSE_TOKENS: TOKENS // 2} if step else {}
        root = tracer.start_span(
            sc.SPAN_STEP,
            context=otel_context.Context(),
            start_time=t,
            attributes={sc.ATTR_GLOBAL_STEP: step, sc.ATTR_EPOCH: step // 4, **step_attrs, **extra},
        )
        ctx = set_span_in_context(root)
        off = t
        for name, dur in todo.items():
            a: dict[str, Any] = {sc.ATTR_PHASE: name, sc.ATTR_GLOBAL_STEP: step}
            if name in sc.TOKEN_PHASES:
                a[sc.ATTR_PHASE_TOKENS] = TOKENS
            ps = tracer.start_span(name, context=ctx, start_time=off, attributes=a)
            if name == sc.PHASE_ROLLOUT:
                ws = tracer.start_span(
                    sc.SPAN_ROLLOUT_WORKER,
                    context=set_span_in_context(ps),
                    start_time=off,
                    attributes={sc.ATTR_WORKER_INDEX: 0, sc.ATTR_MODE: sc.MODE_TRAIN, sc.ATTR_SAMPLES: samples},
                )
                ws.end(end_time=off + int(dur * S))
            ps.end(end_time=off + int(dur * S))
            off += int(dur * S)
        root.end(end_time=off)
        t = off + S
    provider.shutdown()
    return list(exporter.get_finished_spans())
