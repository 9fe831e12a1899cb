"""Scale of the readers (bench/scale.py):

- :func:`write_run`: the trace file set of a long run (``traces.jsonl`` and its rotated files) by the SDK and the
  project's OTLP/JSON encoder: one step's spans are made once per template (a trainer step with its phases; 128
  agent-loop workers, each a ``rollout.worker`` with its 8 slowest ``rollout.sample`` spans; 16 rollout servers'
  ``llm_request`` spans under them; every 10th step a validation with 64 generations), encoded, and written once
  per step with that step's trace id and number.
- :func:`reader_cost`: ``verl-otel slow-steps`` / ``val-generations`` on it in a fresh interpreter: wall seconds
  and peak resident memory (``getrusage`` maxrss).
- :func:`top_frame_ms`: one ``verl-otel top`` scrape of N /metrics pages served on 127.0.0.1, each answering after
  50 ms (optionally one that never answers).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_TRACE = 0x7E57AB1E7E57AB1E7E57AB1E7E57AB1E
_SUMMARY_TRACE = 0x5111A4E75111A4E75111A4E75111A4E7  # the step summary's own trace (telemetry/step_summary.py)
_STEP = 987654321
ROTATE_BYTES = 256 * 2**20  # the writer's default max_bytes


def _template(workers: int, samples: int, engine_per_sample: int, replicas: int, validate: bool) -> bytes:
    """One step's export lines (one per process, as each process' exporter writes them)."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    from verl_otel import semconv as sc
    from verl_otel.export.otlp_json import to_otlp_json
    from verl_otel.telemetry.step_summary import summary_attributes

    class _MarkerIds(RandomIdGenerator):  # every root in the template's trace: replaced per step
        def __init__(self, trace_id: int = _TRACE) -> None:
            self.trace_id = trace_id

        def generate_trace_id(self) -> int:
            return self.trace_id

    t0 = time.time_ns() - 3600 * 10**9
    root_ctx = trace.set_span_in_context(
        NonRecordingSpan(SpanContext(_TRACE, 0x1111, False, TraceFlags(TraceFlags.SAMPLED)))
    )
    lines = []

    def process(process_role: str, index: int | None, build: Any, trace_id: int = _TRACE) -> None:
        mem = InMemorySpanExporter()
        attrs = {"service.name": "verl", "verl.process.role": process_role}
        if index is not None:
            attrs["verl.worker.index"] = index
        provider = TracerProvider(resource=Resource.create(attrs), id_generator=_MarkerIds(trace_id))
        provider.add_span_processor(SimpleSpanProcessor(mem))
        build(provider.get_tracer("verl-otel"))
        lines.append(json.dumps(to_otlp_json(mem.get_finished_spans()), separators=(",", ":")))

    def trainer(tracer: Any) -> None:
        step = tracer.start_span(sc.SPAN_STEP, start_time=t0, attributes={sc.ATTR_GLOBAL_STEP: _STEP})
        ctx = trace.set_span_in_context(step)
        at = t0
        phases = [("gen", 30), ("reward", 2), ("old_log_prob", 5), ("ref", 5), ("adv", 1), ("update_actor", 20)]
        for name, seconds in phases + ([("validate", 10)] if validate else []):
            span = tracer.start_span(name, context=ctx, start_time=at, attributes={sc.ATTR_PHASE: name})
            if name == "validate":
                for i in range(64):
                    span.add_event(
                        sc.EVENT_VAL_GENERATION,
                        {
                            sc.ATTR_VAL_INPUT: f"prompt {i} " + "x" * 400,
                            sc.ATTR_VAL_OUTPUT: f"answer {i} " + "y" * 400,
                            sc.ATTR_VAL_SCORE: 1.0,
                        },
                    )
            at += seconds * 10**9
            span.end(end_time=at)
        step.end(end_time=at)
        ran.update(phases=dict(phases + ([("validate", 10)] if validate else [])), attrs=dict(step.attributes))
        ran.update(start=t0, end=at)

    def summary(tracer: Any) -> None:  # as the trainer writes it at the step's end, in a trace of its own
        p = ran["phases"]
        attrs = summary_attributes(ran["attrs"], _TRACE, p, dict.fromkeys(p, 1), {}, False)
        tracer.start_span(sc.SPAN_STEP_SUMMARY, start_time=ran["start"], attributes=attrs).end(end_time=ran["end"])

    ran: dict[str, Any] = {}
    process("trainer", None, trainer)
    process("trainer", None, summary, _SUMMARY_TRACE)
    sample_ids: list[tuple[int, int, int]] = []  # (worker, sample, span id): the engines' parents
    for w in range(workers):

        def worker(tracer: Any, w: int = w) -> None:
            attrs = {sc.ATTR_MODE: "train", sc.ATTR_GLOBAL_STEP: _STEP, sc.ATTR_WORKER_INDEX: w}
            span = tracer.start_span(sc.SPAN_ROLLOUT_WORKER, context=root_ctx, start_time=t0, attributes=attrs)
            ctx = trace.set_span_in_context(span)
            for i in range(samples):
                attrs = {sc.ATTR_GLOBAL_STEP: _STEP, sc.ATTR_SAMPLE_INDEX: w * 100 + i, sc.ATTR_SAMPLE_ROLLOUT_N: 0}
                s = tracer.start_span(sc.SPAN_ROLLOUT_SAMPLE, context=ctx, start_time=t0, attributes=attrs)
                s.end(end_time=t0 + (20 + i) * 10**9 + w * 10**6)
                sample_ids.append((w, i, s.get_span_context().span_id))
            span.end(end_time=t0 + 30 * 10**9)

        process("agent_loop", w, worker)
    for replica in range(replicas):  # the rollout servers' own lines: vLLM's spans under the samples

        def server(tracer: Any, replica: int = replica) -> None:
            for w, i, span_id in sample_ids[replica::replicas]:
                parent = NonRecordingSpan(SpanContext(_TRACE, span_id, False, TraceFlags(TraceFlags.SAMPLED)))
                for r in range(engine_per_sample):
                    e = tracer.start_span(sc.SPAN_ENGINE_REQUEST, context=trace.set_span_in_context(parent))
                    e.set_attributes(
                        {
                            sc.ENGINE_ATTR_QUEUE: 0.1,
                            sc.ENGINE_ATTR_PREFILL: 0.2,
                            sc.ENGINE_ATTR_DECODE: 20.0,
                            sc.ATTR_ENGINE_REPLICA: replica,
                            sc.ENGINE_ATTR_REQUEST_ID: f"{w}-{i}-{r}",
                        }
                    )
                    e.end(end_time=t0 + (20 + i) * 10**9)

        process("rollout_server", replica, server)
    return ("\n".join(lines) + "\n").encode()


def step_data(template: bytes, step: int) -> bytes:
    """A template's lines with step ``step``'s number and trace ids (its step trace's, its summary's)."""
    data = template.replace(f"{_TRACE:032x}".encode(), f"{step:032x}".encode())
    data = data.replace(f"{_SUMMARY_TRACE:032x}".encode(), f"{(1 << 127) | step:032x}".encode())
    return data.replace(f'"{_STEP}"'.encode(), f'"{step}"'.encode())


def write_run(
    folder: Path, steps: int, workers: int = 128, samples: int = 8, engine: int = 1, replicas: int = 16
) -> int:
    """The rotated file set of a ``steps``-step run in ``folder``; its total bytes."""
    plain = _template(workers, samples, engine, replicas, False)
    val = _template(workers, samples, engine, replicas, True)
    parts: list[Path] = []
    out, size, total = None, 0, 0
    for step in range(1, steps + 1):
        data = step_data(val if step % 10 == 0 else plain, step)
        if out is None or size + len(data) > ROTATE_BYTES:
            if out is not None:
                out.close()
            parts.append(folder / f"part{len(parts)}")
            out, size = open(parts[-1], "wb"), 0  # noqa: SIM115 - closed on rotation
        out.write(data)
        size += len(data)
        total += len(data)
    if out is not None:
        out.close()
    for i, part in enumerate(reversed(parts)):  # the newest is traces.jsonl, the oldest the highest number
        part.rename(folder / ("traces.jsonl" if i == 0 else f"traces.jsonl.{i}"))
    return total


_READER = """
import os, resource, sys, time
from verl_otel.cli.main import main
sys.stdout = open(os.devnull, "w")
t = time.perf_counter()
rc = main(sys.argv[1:])
print(rc, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)
"""


def reader_cost(command: str, trace_file: Path) -> tuple[float, float]:
    """(seconds, peak resident MB) of ``verl-otel <command> --file trace_file --since 30d`` in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _READER, command, "--file", str(trace_file), "--since", "30d", "--json"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    rc, seconds, rss = out.stderr.strip().splitlines()[-1].split()
    if rc != "0":
        raise SystemExit(f"{command} failed: {out.stderr[-2000:]}")
    return float(seconds), float(rss)


def _page(worker: int) -> bytes:
    """A real agent-loop worker's /metrics page (its rollout gauges, train and validate)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from verl_otel.export.prometheus import StoreCollector
    from verl_otel.process.metrics import MetricStore
    from verl_otel.telemetry.rollout import RolloutTracker

    store, tracker = MetricStore(), RolloutTracker()
    tracker.worker = worker
    tracker.batch_started("train", 1, 512, None)
    tracker.batch_started("validate", 1, 64, None)
    store.add_source(tracker.readings)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StoreCollector(store))
    return generate_latest(reg)


class _Pages:
    """``n`` /metrics pages on 127.0.0.1, each answering after ``delay_s``; ``dead`` of them never answer."""

    def __init__(self, n: int, delay_s: float = 0.05, dead: int = 0) -> None:
        body, gate = _page(0), threading.Event()
        self.gate = gate

        class Handler(BaseHTTPRequestHandler):
            never = False

            def do_GET(self) -> None:
                if self.never:
                    gate.wait(30)
                    return
                time.sleep(delay_s)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        class Dead(Handler):
            never = True

        self.servers = [ThreadingHTTPServer(("127.0.0.1", 0), Dead if i < dead else Handler) for i in range(n)]
        for s in self.servers:
            s.daemon_threads = True
            threading.Thread(target=s.serve_forever, daemon=True).start()

    def targets(self) -> list[dict[str, Any]]:
        return [
            {"targets": [f"127.0.0.1:{s.server_address[1]}"], "labels": {"verl_process_role": "agent_loop"}}
            for s in self.servers
        ]

    def close(self) -> None:
        self.gate.set()
        stops = [threading.Thread(target=s.shutdown) for s in self.servers]  # each waits up to its poll interval
        for t in stops:
            t.start()
        for t in stops:
            t.join()
        for s in self.servers:
            s.server_close()


def top_frame_ms(folder: Path, pages: int, dead: int = 0) -> tuple[float, int]:
    """(ms of one scrape of every page, series read) through ``verl-otel top``'s own source."""
    from verl_otel.live.sources import TargetsFile

    served = _Pages(pages, dead=dead)
    try:
        path = folder / f"targets-{pages}-{dead}.json"
        path.write_text(json.dumps(served.targets()))
        t0 = time.perf_counter()
        got = TargetsFile(path).read()
        ms = (time.perf_counter() - t0) * 1e3
        if len(got.failed) != dead:
            raise SystemExit(f"top scraped {pages} pages, {len(got.failed)} failed (expected {dead}): {got.failed[:3]}")
        return ms, len(got.series)
    finally:
        served.close()
