"""`verl-otel slow-steps`' model: step traces built from spans the OTel SDK wrote (OTLP/JSON with hex or
base64 ids): phases, repeated phases, samples, duplicates, what is not a training step, and a sample's
engine time (queue / prefill / decode) from vLLM's request spans."""

from __future__ import annotations

import time
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from helpers.step_spans import N_STEPS, SLOW_STEP, S, actor_s, otlp_json, verl_steps

from verl_otel import semconv as sc
from verl_otel.analysis.otlp_json import parse_request
from verl_otel.analysis.slow_steps import phase_medians, rank, sample_text, to_json
from verl_otel.analysis.step_traces import Span, build_steps


# -- the model -----------------------------------------------------------------------------------------
def test_steps_phases_runs_and_samples(recent_spans):
    steps = verl_steps(recent_spans)
    assert [s.global_step for s in steps] == list(range(N_STEPS + 1))
    st = steps[SLOW_STEP]
    assert st.service == "verl" and len(st.trace_id) == 32 and not st.error
    assert st.phases[sc.PHASE_UPDATE_WEIGHTS] == pytest.approx(0.2) and st.phase_runs[sc.PHASE_UPDATE_WEIGHTS] == 2
    assert st.phases[sc.PHASE_UPDATE_ACTOR] == pytest.approx(actor_s(SLOW_STEP))
    assert sc.SPAN_ROLLOUT_WORKER not in st.phases and sc.SPAN_ROLLOUT_SAMPLE not in st.phases
    assert st.seconds == pytest.approx(sum(st.phases.values()))
    assert [(s.index, s.worker) for s in st.samples[:3]] == [(2, 0), (7, 1), (6, 1)]
    assert st.samples[0].seconds == pytest.approx(1.8) and st.samples[1].error
    assert steps[0].phases == {sc.PHASE_VALIDATE: pytest.approx(30.0)}


def test_base64_ids_parse_like_hex(recent_spans):
    hexed = parse_request(otlp_json(recent_spans[:20]))
    b64 = parse_request(otlp_json(recent_spans[:20], hex_ids=False))
    assert [(s.trace_id, s.span_id, s.parent_id) for s in b64] == [(s.trace_id, s.span_id, s.parent_id) for s in hexed]


def test_duplicate_spans_count_once(recent_spans):
    spans = parse_request(otlp_json(recent_spans))
    steps = build_steps(spans + spans)
    assert steps[SLOW_STEP].phase_runs[sc.PHASE_UPDATE_WEIGHTS] == 2 and len(steps[SLOW_STEP].samples) == 8


def test_a_stopped_step_and_fit_end_are_not_steps(recent_spans):
    """fully_async ends with an empty step marked verl.stopped (the queue closed) and runs its last weight sync
    under fit.end: neither is a training step, so neither is listed nor counted in the medians."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "verl"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer(sc.INSTRUMENTATION_NAME)
    t = time.time_ns() - 60 * S
    for name, attrs in (
        (sc.SPAN_STEP, {sc.ATTR_GLOBAL_STEP: N_STEPS + 1, sc.ATTR_STOPPED: True}),
        (sc.SPAN_FIT_END, {sc.ATTR_GLOBAL_STEP: N_STEPS}),
    ):
        root = tracer.start_span(name, context=otel_context.Context(), start_time=t, attributes=attrs)
        phase = tracer.start_span(
            sc.PHASE_ROLLOUT,
            context=set_span_in_context(root),
            start_time=t,
            attributes={sc.ATTR_PHASE: sc.PHASE_ROLLOUT},
        )
        phase.end(end_time=t + S // 100)
        root.end(end_time=t + S // 100)
    provider.shutdown()
    extra = list(exporter.get_finished_spans())
    steps = verl_steps(recent_spans + extra)
    assert [s.global_step for s in steps] == list(range(N_STEPS + 1))
    assert phase_medians(steps) == phase_medians(verl_steps(recent_spans))


def test_span_seconds_never_negative():
    assert Span("a" * 32, "b" * 16, "", "x", 10, 5).seconds == 0.0


def test_a_slow_samples_engine_time_says_queue_prefill_or_decode():
    """vLLM's llm_request spans under a sample (engine spans on): their queue / prefill / decode time and the
    replica that served them are the sample's "why"; several requests (turns) add up."""
    tid = "ab" * 16

    def span(sid: str, parent: str, name: str, start: float, end: float, **attrs: Any) -> Span:
        return Span(tid, sid, parent, name, int(start * S), int(end * S), attrs)

    spans = [
        span("0" * 15 + "1", "", sc.SPAN_STEP, 0, 10, **{sc.ATTR_GLOBAL_STEP: 4}),
        span("0" * 15 + "2", "0" * 15 + "1", sc.PHASE_ROLLOUT, 0, 6, **{sc.ATTR_PHASE: sc.PHASE_ROLLOUT}),
        span("0" * 15 + "3", "0" * 15 + "2", sc.SPAN_ROLLOUT_WORKER, 0, 6, **{sc.ATTR_WORKER_INDEX: 0}),
        span("0" * 15 + "4", "0" * 15 + "3", sc.SPAN_ROLLOUT_SAMPLE, 0, 5, **{sc.ATTR_SAMPLE_INDEX: 3}),
        span("0" * 15 + "5", "0" * 15 + "3", sc.SPAN_ROLLOUT_SAMPLE, 0, 1, **{sc.ATTR_SAMPLE_INDEX: 4}),
        *[
            span(
                f"{'0' * 14}a{turn}",
                "0" * 15 + "4",
                sc.SPAN_ENGINE_REQUEST,
                turn * 2,
                turn * 2 + 2,
                **{
                    sc.ENGINE_ATTR_QUEUE: 1.5,
                    sc.ENGINE_ATTR_PREFILL: 0.1,
                    sc.ENGINE_ATTR_DECODE: 0.4,
                    sc.ATTR_ENGINE_REPLICA: 1,
                },
            )
            for turn in range(2)
        ],
    ]
    (step,) = build_steps(spans)
    assert [s.index for s in step.samples] == [3, 4] and sc.SPAN_ENGINE_REQUEST not in step.phases
    slow, fast = step.samples
    assert fast.engine is None and slow.engine is not None
    assert (slow.engine.requests, slow.engine.replica) == (2, 1)
    assert (slow.engine.queue_s, slow.engine.prefill_s, slow.engine.decode_s) == pytest.approx((3.0, 0.2, 0.8))
    assert sample_text(slow) == (
        "#3 5.00s (worker 0, engine: queue 3.00s, prefill 0.20s, decode 0.80s in 2 requests, replica 1)"
    )
    doc = to_json(rank([step], 1), None)[0]["slowest_samples"]
    assert doc[0]["engine"] == {"requests": 2, "queue_s": 3.0, "prefill_s": 0.2, "decode_s": 0.8, "replica": 1}
    assert doc[1]["engine"] is None
