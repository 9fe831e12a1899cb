"""Step traces as verl-otel records them, written by the OTel SDK itself: a run with one known slow step
(``sdk_run``), as OTLP/JSON (``otlp_json``), as the Collector's file exporter writes it (``write_lines``), and
read back into step traces (``verl_steps``). The ``recent_spans`` fixture (tests/conftest.py) is such a run."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry import context as otel_context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from verl_otel import semconv as sc
from verl_otel.analysis.otlp_json import parse_request
from verl_otel.analysis.step_traces import StepTrace, build_steps

S = 10**9
SLOW_STEP, FACTOR, N_STEPS = 3, 3.4, 10
CKPT_S = 1.5  # the last step's checkpoint: second slowest step, after SLOW_STEP


def actor_s(step: int) -> float:
    return (1.0 + 0.01 * (step % 3)) * (FACTOR if step == SLOW_STEP else 1.0)


def sdk_run(t0_ns: int, n: int = N_STEPS, service: str = "verl") -> list[ReadableSpan]:
    """A run as verl-otel records it: step 0 (validation only), then n training steps. update_actor of
    SLOW_STEP is FACTOR times slower; adv is ~0 s but 4x at SLOW_STEP (a ratio that must not count);
    update_weights runs twice a step; the last step saves a checkpoint (a phase that is usually absent)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer(sc.INSTRUMENTATION_NAME)
    t = t0_ns
    for step in range(n + 1):
        if step == 0:
            phases = [(sc.PHASE_VALIDATE, 30.0)]
        else:
            phases = [
                (sc.PHASE_ROLLOUT, 2.0 + 0.01 * step),
                (sc.PHASE_OLD_LOG_PROB, 0.5),
                (sc.PHASE_ADV, 0.008 if step == SLOW_STEP else 0.002),
                (sc.PHASE_UPDATE_WEIGHTS, 0.1),
                (sc.PHASE_UPDATE_ACTOR, actor_s(step)),
                (sc.PHASE_UPDATE_WEIGHTS, 0.1),
            ]
            if step == n:
                phases.append((sc.PHASE_SAVE_CHECKPOINT, CKPT_S))
        total = int(sum(d for _, d in phases) * S)
        root = tracer.start_span(
            sc.SPAN_STEP,
            context=otel_context.Context(),
            start_time=t,
            attributes={sc.ATTR_GLOBAL_STEP: step, sc.ATTR_TRAINER: "v1"},
        )
        ctx = set_span_in_context(root)
        off = t
        for name, dur in phases:
            ps = tracer.start_span(
                name, context=ctx, start_time=off, attributes={sc.ATTR_PHASE: name, sc.ATTR_GLOBAL_STEP: step}
            )
            if name == sc.PHASE_ROLLOUT:
                wctx = set_span_in_context(ps)
                for w in range(2):
                    ws = tracer.start_span(
                        sc.SPAN_ROLLOUT_WORKER,
                        context=wctx,
                        start_time=off,
                        attributes={sc.ATTR_WORKER_INDEX: w, sc.ATTR_MODE: sc.MODE_TRAIN},
                    )
                    sctx = set_span_in_context(ws)
                    for k in range(4):
                        idx = 4 * w + k
                        secs = 0.1 * (idx + 1) + (1.5 if (step, idx) == (SLOW_STEP, 2) else 0.0)
                        ss = tracer.start_span(
                            sc.SPAN_ROLLOUT_SAMPLE,
                            context=sctx,
                            start_time=off,
                            attributes={
                                sc.ATTR_SAMPLE_INDEX: idx,
                                sc.ATTR_SAMPLE_ROLLOUT_N: k % 2,
                                sc.ATTR_GLOBAL_STEP: step,
                            },
                        )
                        if idx == 7:
                            ss.set_status(Status(StatusCode.ERROR, "tool crashed"))
                        ss.end(end_time=off + int(secs * S))
                    ws.end(end_time=off + int(dur * S))
            ps.end(end_time=off + int(dur * S))
            off += int(dur * S)
        root.end(end_time=t + total)
        t += total + S
    provider.shutdown()
    return list(exporter.get_finished_spans())


def otlp_json(spans: list[ReadableSpan], hex_ids: bool = True) -> dict[str, Any]:
    """One ExportTraceServiceRequest as OTLP/JSON. MessageToDict gives base64 ids; OTLP/JSON wants hex."""
    doc = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    if hex_ids:
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if sp.get(key):
                            sp[key] = base64.b64decode(sp[key]).hex()
    return doc


def write_lines(path: Path, spans: list[ReadableSpan], extra: list[str] = (), batch: int = 7) -> None:
    """Batches of spans, one request per line (as a BatchSpanProcessor would write them)."""
    lines = [json.dumps(otlp_json(spans[i : i + batch])) for i in range(0, len(spans), batch)]
    for k, bad in enumerate(extra):  # garbage spread between good lines
        lines.insert(1 + 3 * k, bad)
    path.write_text("\n".join(lines) + "\n")


def verl_steps(spans: list[ReadableSpan]) -> list[StepTrace]:
    return build_steps(parse_request(otlp_json(spans)))
