"""Straggling ranks (issue 28, part 3): slow-steps names the rank that held a phase up, from worker.* spans written
by the OTel SDK as verl-otel's workers write them (the CPU demo has one FSDP rank: tests/test_e2e_why_slow.py
checks that it names none there); each worker call sets its rank's gauge for the recording rule and alert
(their promtool tests: deploy/prometheus/tests/verl-alerts.test.yml)."""

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from helpers.step_spans import verl_steps

from verl_otel import runtime, trackers
from verl_otel import semconv as sc
from verl_otel.analysis import slow_steps, stragglers

S = 10**9
RANKS, SLOW_STEP, SLOW_RANK = 4, 3, 2


def _call_s(step: int, phase: str, rank: int) -> float:
    base = 1.0 + 0.02 * rank  # ranks differ a little: no straggler
    return base * 2.5 if (step, phase, rank) == (SLOW_STEP, sc.PHASE_UPDATE_ACTOR, SLOW_RANK) else base


def _run(n: int = 5) -> list:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer(sc.INSTRUMENTATION_NAME)
    t = 1_700_000_000 * S
    for step in range(1, n + 1):
        root = tracer.start_span(sc.SPAN_STEP, context=otel_context.Context(), start_time=t)
        root.set_attribute(sc.ATTR_GLOBAL_STEP, step)
        off = t
        for phase, method in ((sc.PHASE_OLD_LOG_PROB, "compute_log_prob"), (sc.PHASE_UPDATE_ACTOR, "update_actor")):
            longest = max(_call_s(step, phase, r) for r in range(RANKS))
            ps = tracer.start_span(phase, context=set_span_in_context(root), start_time=off)
            ps.set_attribute(sc.ATTR_PHASE, phase)
            for rank in range(RANKS):
                attrs = {sc.ATTR_WORKER_METHOD: method, sc.ATTR_WORKER_ROLE: "actor", sc.ATTR_WORKER_RANK: rank}
                ws = tracer.start_span(
                    sc.WORKER_SPAN_NAMES[method], context=set_span_in_context(ps), start_time=off, attributes=attrs
                )
                ws.end(end_time=off + int(_call_s(step, phase, rank) * S))
            ps.end(end_time=off + int(longest * S))
            off += int(longest * S)
        root.end(end_time=off)
        t = off + S
    provider.shutdown()
    return list(exporter.get_finished_spans())


def test_the_straggling_rank_is_named_in_its_phase():
    steps = verl_steps(_run())
    by_number = {s.global_step: s for s in steps}
    slow = stragglers.stragglers(by_number[SLOW_STEP])
    assert [(x.phase, x.rank, x.ranks) for x in slow] == [(sc.PHASE_UPDATE_ACTOR, SLOW_RANK, RANKS)]
    assert slow[0].ratio == pytest.approx(2.5)  # 2.6 s over the median of 1.00, 1.02, 2.60, 1.06 s: 1.04 s
    assert all(stragglers.stragglers(s) == [] for n, s in by_number.items() if n != SLOW_STEP)
    # the jitter between ranks is seen but is no straggler
    assert stragglers.slowest_ranks(by_number[1])[0].rank == RANKS - 1
    ranking = slow_steps.rank(steps, 1)
    text = slow_steps.to_text(ranking, None)
    assert (
        f"   straggler: rank {SLOW_RANK} in update_actor (actor) 2.5\u00d7 the median rank (2.60s vs 1.04s, "
        f"worker.update_actor on {RANKS} ranks)"
    ) in text.splitlines()
    js = slow_steps.to_json(ranking, None)[0]["stragglers"]
    assert js == [
        {
            "phase": sc.PHASE_UPDATE_ACTOR,
            "call": "worker.update_actor",
            "role": "actor",
            "rank": SLOW_RANK,
            "duration_s": 2.6,
            "median_rank_s": 1.04,
            "ratio": 2.5,
            "ranks": RANKS,
        }
    ]


def test_one_rank_has_nobody_to_straggle_behind():
    from verl_otel.analysis.step_traces import StepTrace

    st = StepTrace("a" * 32, 1, 0, 5.0, "verl", False)
    st.rank_calls = {(sc.PHASE_UPDATE_ACTOR, "worker.update_actor", "actor"): {0: 5.0}}
    assert stragglers.slowest_ranks(st) == [] and stragglers.stragglers(st) == []


def test_each_worker_call_sets_its_ranks_gauge():
    from verl_otel.telemetry.worker_spans import WorkerSpan

    runtime.reset_for_tests()
    try:
        tp = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
        services = trackers.current().services
        with WorkerSpan(services, "update_actor", "actor", 3, tp, 8):
            pass
        with WorkerSpan(services, "compute_log_prob", "actor", 3, None, 8):  # no trainer context: no span, no reading
            pass
        with pytest.raises(RuntimeError), WorkerSpan(services, "compute_log_prob", "actor", 3, tp, 8):
            raise RuntimeError("a failed call is no timing")
        got = {lbl: v for m, lbl, v in runtime.current().store.readings() if m is sc.WORKER_CALL_SECONDS}
        assert list(got) == [("update_actor", "actor", "3")] and 0 <= got[("update_actor", "actor", "3")] < 1
    finally:
        runtime.reset_for_tests()


def test_the_streamed_file_names_the_same_straggler(tmp_path):
    """slow-steps streams a trace file (analysis/step_stream.py): the worker calls' ranks survive it."""
    from helpers.step_spans import write_lines

    from verl_otel.analysis.step_stream import read_steps

    spans = _run()
    write_lines(tmp_path / "traces.jsonl", spans)
    streamed, _ = read_steps(tmp_path / "traces.jsonl")
    by_number = {s.global_step: s for s in streamed}
    slow = stragglers.stragglers(by_number[SLOW_STEP])
    assert [(x.phase, x.rank, x.ranks) for x in slow] == [(sc.PHASE_UPDATE_ACTOR, SLOW_RANK, RANKS)]
    assert [s.rank_calls for s in streamed] == [s.rank_calls for s in verl_steps(spans)]
