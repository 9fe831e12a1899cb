"""Hosts whose clocks disagree (analysis/clock.py): a step on host A whose rollout ran on an agent-loop worker of
host B (B's clock 2 s behind, so its spans seem to start before A's rollout phase) and one of host A. Synthetic
spans written by the SDK (a provider per host), read back by the full reader and the streaming one: every span
kept, each duration as measured, B's offset found (the smallest shift that puts B's worker inside the phase:
1.9 s of the 2) and said, the long tail compared on aligned times."""

from __future__ import annotations

import json

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from helpers.step_spans import S, write_lines

from verl_otel import semconv as sc
from verl_otel.analysis import clock
from verl_otel.analysis import long_tail as lt
from verl_otel.analysis.otlp_json import read_file
from verl_otel.analysis.slow_steps import rank, to_json, to_text
from verl_otel.analysis.step_stream import read_steps
from verl_otel.analysis.step_traces import build_steps

SKEW_S = 2.0  # host B's clock is this far behind A's


def _provider(host: str, exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "verl", sc.RES_NODE: host}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def skewed_run(t0: int, steps: int = 3, skew_s: float = SKEW_S) -> list:
    """``steps`` steps on host A, each with a rollout whose agent-loop worker 0 ran on host B and worker 1 on A;
    sample #1 of worker 0 ends 1.5 s after every other sample (the long tail), in real time."""
    exporter = InMemorySpanExporter()
    a, b = _provider("hostA", exporter).get_tracer("t"), _provider("hostB", exporter).get_tracer("t")
    behind = int(skew_s * S)
    t = t0
    for step in range(1, steps + 1):
        root = a.start_span(sc.SPAN_STEP, start_time=t, attributes={sc.ATTR_GLOBAL_STEP: step})
        rollout = a.start_span(
            sc.PHASE_ROLLOUT,
            context=set_span_in_context(root),
            start_time=t + S // 10,
            attributes={sc.ATTR_PHASE: sc.PHASE_ROLLOUT},
        )
        for w in range(2):
            tracer, ws = (b, t + S // 5 - behind) if w == 0 else (a, t + S // 5)  # B's clock: behind A's
            worker = tracer.start_span(
                sc.SPAN_ROLLOUT_WORKER,
                context=set_span_in_context(rollout),
                start_time=ws,
                attributes={sc.ATTR_WORKER_INDEX: w, sc.ATTR_MODE: sc.MODE_TRAIN, sc.ATTR_WORKER_SAMPLE_MEDIAN_S: 0.5},
            )
            for i in range(3):
                long = w == 0 and i == 1
                sample = tracer.start_span(
                    sc.SPAN_ROLLOUT_SAMPLE,
                    context=set_span_in_context(worker),
                    start_time=ws + S // 20,
                    attributes={sc.ATTR_SAMPLE_INDEX: i},
                )
                sample.end(end_time=ws + S // 20 + (2 * S if long else S // 2))
            worker.end(end_time=ws + 2 * S + S // 10)
        rollout.end(end_time=t + 3 * S)
        root.end(end_time=t + 4 * S)
        t += 5 * S
    return list(exporter.get_finished_spans())


def test_a_skewed_host_is_aligned_said_and_nothing_dropped(tmp_path):
    spans = skewed_run(10**18)
    path = tmp_path / sc.TRACES_FILE
    write_lines(path, spans)
    full = build_steps(read_file(path).spans)
    streamed, _ = read_steps(path, samples_kept=6)
    for steps in (full, streamed):
        assert [st.global_step for st in steps] == [1, 2, 3]
        for st in steps:
            assert st.clock_offsets == {"hostB": 1.9}, st.clock_offsets  # B moved later, A is the reference
            assert st.clock_skew_s == 1.9
            assert len(st.samples) == 6, "every sample kept"
            assert st.samples[0].seconds == 2.0 and st.samples[-1].seconds == 0.5, "durations as measured"
            # the sample's end on A's clock: inside the rollout phase (0.1 s .. 3 s after the step's start)
            assert st.start_ns + S // 10 <= st.samples[0].end_ns <= st.start_ns + 3 * S
            # unaligned, B's long sample would seem to end before A's samples (alone 0 s); aligned: 1.4 s of the
            # 1.5 s it ran alone (the 0.1 s the offset estimate falls short of the real skew)
            tail = lt.tail(st)
            assert tail is not None and abs(tail.alone_s - 1.4) < 1e-6, tail
    ranking = rank(full, 3)
    text = to_text(ranking, None)
    assert "clock skew: hostB +1.900s against the step's host (times aligned" in text, text
    doc = to_json(ranking, None)
    assert doc[0]["clock_skew_s"] == 1.9 and doc[0]["clock_offsets"] == {"hostB": 1.9}
    json.dumps(doc)


def test_hosts_on_one_clock_give_no_offset(tmp_path):
    spans = skewed_run(10**18, steps=1, skew_s=0.0)
    steps = build_steps(read_file(_write(tmp_path, spans)).spans)
    assert steps[0].clock_offsets == {} and steps[0].clock_skew_s == 0.0
    assert "clock skew" not in to_text(rank(steps, 1), None)


def test_a_child_ending_after_its_parent_moves_earlier():
    """B ahead of A: its worker ends 0.3 s after the rollout phase; the offset is -0.3 s, and none within tolerance."""
    spans = skewed_run(10**18, steps=1, skew_s=-1.0)  # B's clock 1 s ahead
    steps = build_steps(read_file_spans(spans))
    assert steps[0].clock_offsets == {"hostB": -0.3}
    tiny = skewed_run(10**18, steps=1, skew_s=-clock.TOLERANCE_S / 2)
    assert build_steps(read_file_spans(tiny))[0].clock_offsets == {}


def read_file_spans(spans: list) -> list:
    from helpers.step_spans import otlp_json

    from verl_otel.analysis.otlp_json import parse_request

    return parse_request(otlp_json(spans))


def _write(tmp_path, spans):
    path = tmp_path / sc.TRACES_FILE
    write_lines(path, spans)
    return path
