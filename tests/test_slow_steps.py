"""`verl-otel slow-steps`: step traces written by the OTel SDK itself (OTLP/JSON, as the Collector's file
exporter writes) or served by a local Jaeger; ranking, the deviating phase, ~0-median phases, samples,
text and --json, malformed lines skipped and counted, empty window, unreachable Jaeger."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry import context as otel_context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from test_jaeger_client import FakeJaeger, closed_port, many_steps, v3_body

from verl_otel import semconv as sc
from verl_otel.analysis.step_traces import Sample, Span, StepTrace, build_steps
from verl_otel.analysis.otlp_json import parse_request, read_file
from verl_otel.analysis.slow_steps import Ranking, explain, phase_medians, rank, sample_text, to_json, to_text
from verl_otel.cli import slow_steps as cli

S = 10**9
SLOW_STEP, FACTOR, N_STEPS = 3, 3.4, 10
CKPT_S = 1.5  # the last step's checkpoint: second slowest step, after SLOW_STEP


# -- writing step traces with the SDK --------------------------------------------------------------------
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
    for step in range(0, n + 1):
        if step == 0:
            phases = [(sc.PHASE_VALIDATE, 30.0)]
        else:
            phases = [(sc.PHASE_ROLLOUT, 2.0 + 0.01 * step), (sc.PHASE_OLD_LOG_PROB, 0.5),
                      (sc.PHASE_ADV, 0.008 if step == SLOW_STEP else 0.002), (sc.PHASE_UPDATE_WEIGHTS, 0.1),
                      (sc.PHASE_UPDATE_ACTOR, actor_s(step)), (sc.PHASE_UPDATE_WEIGHTS, 0.1)]
            if step == n:
                phases.append((sc.PHASE_SAVE_CHECKPOINT, CKPT_S))
        total = int(sum(d for _, d in phases) * S)
        root = tracer.start_span(sc.SPAN_STEP, context=otel_context.Context(), start_time=t,
                                 attributes={sc.ATTR_GLOBAL_STEP: step, sc.ATTR_TRAINER: "v1"})
        ctx = set_span_in_context(root)
        off = t
        for name, dur in phases:
            ps = tracer.start_span(name, context=ctx, start_time=off,
                                   attributes={sc.ATTR_PHASE: name, sc.ATTR_GLOBAL_STEP: step})
            if name == sc.PHASE_ROLLOUT:
                wctx = set_span_in_context(ps)
                for w in range(2):
                    ws = tracer.start_span(sc.SPAN_ROLLOUT_WORKER, context=wctx, start_time=off,
                                           attributes={sc.ATTR_WORKER_INDEX: w, sc.ATTR_MODE: sc.MODE_TRAIN})
                    sctx = set_span_in_context(ws)
                    for k in range(4):
                        idx = 4 * w + k
                        secs = 0.1 * (idx + 1) + (1.5 if (step, idx) == (SLOW_STEP, 2) else 0.0)
                        ss = tracer.start_span(sc.SPAN_ROLLOUT_SAMPLE, context=sctx, start_time=off,
                                               attributes={sc.ATTR_SAMPLE_INDEX: idx, sc.ATTR_SAMPLE_ROLLOUT_N: k % 2,
                                                           sc.ATTR_GLOBAL_STEP: step})
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
    lines = [json.dumps(otlp_json(spans[i:i + batch])) for i in range(0, len(spans), batch)]
    for k, bad in enumerate(extra):  # garbage spread between good lines
        lines.insert(1 + 3 * k, bad)
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def recent_spans() -> list[ReadableSpan]:
    return sdk_run(time.time_ns() - 3600 * S)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verl-otel")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def run_cli(*argv: str) -> int:
    return cli.run(make_parser().parse_args(["slow-steps", *argv]))


def verl_steps(spans: list[ReadableSpan]) -> list[StepTrace]:
    return build_steps(parse_request(otlp_json(spans)))


# -- the model -----------------------------------------------------------------------------------------
def test_steps_phases_runs_and_samples(recent_spans):
    steps = verl_steps(recent_spans)
    assert [s.global_step for s in steps] == list(range(0, N_STEPS + 1))
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
    for name, attrs in ((sc.SPAN_STEP, {sc.ATTR_GLOBAL_STEP: N_STEPS + 1, sc.ATTR_STOPPED: True}),
                        (sc.SPAN_FIT_END, {sc.ATTR_GLOBAL_STEP: N_STEPS})):
        root = tracer.start_span(name, context=otel_context.Context(), start_time=t, attributes=attrs)
        phase = tracer.start_span(sc.PHASE_ROLLOUT, context=set_span_in_context(root), start_time=t,
                                  attributes={sc.ATTR_PHASE: sc.PHASE_ROLLOUT})
        phase.end(end_time=t + S // 100)
        root.end(end_time=t + S // 100)
    provider.shutdown()
    extra = list(exporter.get_finished_spans())
    steps = verl_steps(recent_spans + extra)
    assert [s.global_step for s in steps] == list(range(0, N_STEPS + 1))
    assert phase_medians(steps) == phase_medians(verl_steps(recent_spans))


# -- ranking and the cause ----------------------------------------------------------------------------------
def test_slow_step_ranked_first_with_its_deviating_phase(recent_spans):
    steps = verl_steps(recent_spans)
    ranking = rank(steps, 3)
    assert ranking.steps_compared == N_STEPS  # step 0 (validation before training) is not compared
    assert [v.step.global_step for v in ranking.verdicts][:2] == [SLOW_STEP, N_STEPS]
    top = ranking.verdicts[0]
    actor_median = sorted(actor_s(s) for s in range(1, N_STEPS + 1))[N_STEPS // 2 - 1: N_STEPS // 2 + 1]
    assert top.cause is not None and top.cause.phase == sc.PHASE_UPDATE_ACTOR and top.note is None
    assert top.cause.median_s == pytest.approx(sum(actor_median) / 2)
    assert top.cause.ratio == pytest.approx(actor_s(SLOW_STEP) / top.cause.median_s) and 3.3 < top.cause.ratio < 3.5
    assert sc.PHASE_ADV not in top.ratios  # 4x, but of a ~0 s median: no ratio is computed
    assert top.unusual == []


def test_usually_absent_phase_is_named_not_ratioed(recent_spans):
    steps = verl_steps(recent_spans)
    medians = phase_medians(steps[1:])
    assert medians[sc.PHASE_SAVE_CHECKPOINT] == 0.0  # absent from 9 of 10 steps
    ckpt = next(v for v in rank(steps, 5).verdicts if v.step.global_step == N_STEPS)
    # all of its time is extra: the cause, with no ratio (its median is 0)
    assert ckpt.cause.phase == sc.PHASE_SAVE_CHECKPOINT and ckpt.cause.ran_in == 1 and ckpt.unusual == []
    assert ckpt.cause.excess_s == pytest.approx(CKPT_S) and sc.PHASE_SAVE_CHECKPOINT not in ckpt.ratios
    text = to_text(rank(steps, 5), "http://j")
    assert f"#2 step {N_STEPS} " in text
    assert ("   cause: save_checkpoint 1.50s, a phase that does not run every step (ran in 1 of 10 steps)\n"
            in text)
    # where another phase adds more time, it is the cause and the occasional one is listed beside it
    slow_actor = dataclasses.replace(ckpt.step, phases={**ckpt.step.phases, sc.PHASE_UPDATE_ACTOR: 3.03})
    text = to_text(Ranking([explain(slow_actor, medians, 0.01, N_STEPS)], N_STEPS, medians, 0.01), "http://j")
    assert "cause: update_actor 3.0" in text and "   also:  save_checkpoint 1.50s, a phase that does not" in text


def test_a_phase_of_only_some_steps_counts_with_all_its_time():
    """The demo's case (issue 16): validate in the slow steps, absent from the others; update_actor
    a little slower there too. Validation is what makes them slow, even when it ran in most steps."""
    steps = [_step(1, 5.0, rollout=3.0, update_actor=0.5), _step(3, 5.0, rollout=3.0, update_actor=0.5)]
    steps += [_step(2, 7.25, rollout=3.0, update_actor=0.65, validate=2.1),
              _step(4, 7.25, rollout=3.0, update_actor=0.65, validate=2.1),
              _step(5, 7.25, rollout=3.0, update_actor=0.65, validate=2.1)]
    ranking = rank(steps, 3)
    assert {v.step.global_step for v in ranking.verdicts} == {2, 4, 5}
    for v in ranking.verdicts:
        assert v.cause.phase == "validate" and v.cause.ran_in == 3 and v.cause.excess_s == pytest.approx(2.1)
    assert "cause: validate 2.10s, a phase that does not run every step (ran in 3 of 5 steps)" in to_text(ranking, None)
    doc = to_json(ranking, None)[0]
    assert doc["cause"]["ratio_to_median"] is None and doc["cause"]["ran_in_steps"] == 3 and doc["link"] is None
    # a short occasional phase does not outweigh a real deviation
    steps[-1] = _step(5, 8.0, rollout=3.0, update_actor=2.5, save_checkpoint=0.4)
    assert rank(steps, 1).verdicts[0].cause.phase == "update_actor"


def _step(gs: int, secs: float, **phases: float) -> StepTrace:
    return StepTrace(f"{gs:032x}", gs, gs * S, secs, "verl", False, dict(phases), {p: 1 for p in phases})


def test_ties_at_the_shown_precision_go_to_the_larger_excess():
    steps = [_step(i, 15.0, rollout=10.0, update_actor=5.0) for i in range(1, 6)]
    steps.append(_step(6, 30.5, rollout=20.3, update_actor=10.2))  # 2.03x (+10.3 s) vs 2.04x (+5.2 s): both "2.0x"
    v = rank(steps, 1).verdicts[0]
    assert v.step.global_step == 6 and v.cause.phase == "rollout" and v.cause.excess_s == pytest.approx(10.3)
    steps[-1] = _step(6, 30.0, rollout=12.0, update_actor=12.0)  # 1.2x vs 2.4x: the ratio decides
    assert rank(steps, 1).verdicts[0].cause.phase == "update_actor"


def test_all_medians_near_zero_is_said_plainly():
    steps = [_step(i, 1.0, adv=0.001) for i in range(1, 6)]
    v = explain(steps[0], phase_medians(steps), 0.01, 5)
    assert v.cause is None and "~0 s" in v.note
    assert "cause: none to name; every phase's median is ~0 s" in to_text(rank(steps, 1), "http://j")
    v = explain(_step(9, 1.0), {}, 0.01, 5)
    assert v.cause is None and v.note == "the step has no phase spans"


def test_nothing_stands_out_when_the_step_is_ordinary():
    steps = [_step(i, 10.0 + 0.1 * i, rollout=8.0 + 0.1 * i, update_actor=2.0) for i in range(1, 8)]
    v = rank(steps, 1).verdicts[0]
    assert v.step.global_step == 7 and not v.cause.stands_out
    text = to_text(rank(steps, 1), "http://j")
    assert "   cause: no phase stands out (the largest is rollout 1.04\u00d7 its median)\n" in text


def test_sample_text():
    assert sample_text(Sample(4, 1.234, 1, False, 1, sc.MODE_VALIDATE)) == "#4 1.23s (n=1, worker 1, validate)"
    assert sample_text(Sample(None, 0.5, None, True)) == "#? 0.50s ERROR"


def test_json_rendering_fields(recent_spans):
    doc = to_json(rank(verl_steps(recent_spans), 2), "http://jaeger:16686/")
    assert json.loads(json.dumps(doc)) == doc
    top = doc[0]
    assert top["rank"] == 1 and top["global_step"] == SLOW_STEP
    assert top["link"] == f"http://jaeger:16686/trace/{top['trace_id']}"
    assert top["cause"]["phase"] == "update_actor" and top["cause"]["stands_out"] is True
    expected = actor_s(SLOW_STEP) / top["cause"]["median_s"]
    assert top["cause"]["ratio_to_median"] == pytest.approx(expected, abs=0.01)
    assert list(top["phases"])[0] == "update_actor" and top["phase_runs"]["update_weights"] == 2
    assert [(s["index"], s["rollout_n"], s["worker"], s["mode"]) for s in top["slowest_samples"]] == [
        (2, 0, 0, "train"), (7, 1, 1, "train"), (6, 0, 1, "train")]
    assert top["slowest_samples"][1]["error"] is True and top["slowest_samples"][0]["duration_s"] == 1.8
    assert top["start"].endswith("Z")
    assert doc[1]["cause"]["phase"] == "save_checkpoint" and doc[1]["also_not_every_step"] == []


# -- the CLI on a file ------------------------------------------------------------------------------------
GARBAGE = [
    "{not json",
    '{"resourceSpans": [{"scopeSpans": [{"spans": [{}]}]}]}',
    "[]",
    '"a string"',
    '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "nothex!", "spanId": "01", "name": "x", '
    '"startTimeUnixNano": "1", "endTimeUnixNano": "2"}]}]}]}',
    "[" * 100_000,  # deep enough to hit the JSON decoder's recursion limit
]
NOT_UTF8 = b"\xff\xfe{half a line\n"


def test_cli_text_on_a_file_with_malformed_lines(tmp_path, capsys, recent_spans):
    f = tmp_path / "traces.jsonl"
    write_lines(f, recent_spans, GARBAGE)
    with open(f, "ab") as fh:
        fh.write(NOT_UTF8)
    bad = len(GARBAGE) + 1
    assert read_file(f).malformed == bad
    assert run_cli("--file", str(f), "--top", "2") == 0
    out, err = capsys.readouterr()
    assert err.strip() == f"verl-otel slow-steps: skipped {bad} malformed lines in {f}"
    lines = out.splitlines()
    assert lines[0].startswith("2 slowest of 10 steps of service 'verl' in the last 24h")
    # a file read with no Jaeger named: no trace links (they would point at a Jaeger that may not exist)
    assert lines[1].startswith(f"#1 step {SLOW_STEP} ") and "/trace/" not in out and "http" not in out
    assert lines[2].startswith("   cause: update_actor 3.4\u00d7 its median (")
    assert "update_weights 0.20s (1.0\u00d7) in 2 runs" in out
    assert ("   slowest samples: #2 1.80s (n=0, worker 0), #7 0.80s (n=1, worker 1) ERROR, "
            "#6 0.70s (n=0, worker 1)") in out
    assert f"#2 step {N_STEPS} " in out


def test_cli_json(tmp_path, capsys, recent_spans):
    f = tmp_path / "traces.jsonl"
    write_lines(f, recent_spans)
    assert run_cli("--file", str(f), "--json", "--top", "20", "--jaeger-ui", "http://ui:1") == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert err == "" and len(doc) == N_STEPS and [d["rank"] for d in doc] == list(range(1, N_STEPS + 1))
    assert doc[0]["global_step"] == SLOW_STEP and doc[0]["cause"]["phase"] == "update_actor"
    assert all(d["link"].startswith("http://ui:1/trace/") for d in doc)
    assert [d["duration_s"] for d in doc] == sorted((d["duration_s"] for d in doc), reverse=True)


def test_cli_default_file_is_under_verl_otel_dir(tmp_path, capsys, monkeypatch, recent_spans):
    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    write_lines(tmp_path / "run" / sc.TRACES_FILE, recent_spans)
    assert run_cli("--top", "1") == 0
    assert f"#1 step {SLOW_STEP} " in capsys.readouterr().out
    monkeypatch.delenv(sc.ENV_DIR)
    monkeypatch.chdir(tmp_path)
    assert run_cli() == 2
    assert "cannot read verl-otel-data/traces.jsonl" in capsys.readouterr().err


def test_cli_empty_window(tmp_path, capsys):
    f = tmp_path / "traces.jsonl"
    write_lines(f, sdk_run(time.time_ns() - 3 * 86400 * S))  # three days old
    assert run_cli("--file", str(f), "--since", "2h") == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"verl-otel slow-steps: no step traces found for service 'verl' in the last 2h in {f}")
    assert "older spans in the file: widen --since" in err
    assert run_cli("--file", str(f), "--since", "4d", "--top", "1") == 0
    capsys.readouterr()
    f.write_text("")
    assert run_cli("--file", str(f)) == 2
    assert "no step traces found" in capsys.readouterr().err


def test_cli_other_service_hint(tmp_path, capsys):
    f = tmp_path / "traces.jsonl"
    write_lines(f, sdk_run(time.time_ns() - 600 * S, n=3, service="my-rl"))
    assert run_cli("--file", str(f)) == 2
    assert "(step traces exist for service 'my-rl': use --service)" in capsys.readouterr().err
    assert run_cli("--file", str(f), "--service", "my-rl", "--top", "1") == 0


@pytest.mark.parametrize(("text", "seconds"), [("2h", 7200), ("30m", 1800), ("1d", 86400), ("90s", 90), ("45", 45)])
def test_since_parsing(text, seconds):
    assert cli.parse_since(text) == seconds
    assert make_parser().parse_args(["slow-steps", "--since", text]).since == seconds


@pytest.mark.parametrize("argv", [["--since", "soon"], ["--since", "0h"], ["--top", "0"], ["--top", "x"],
                                  ["--jaeger", "http://a", "--file", "b"]])
def test_bad_options_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as ei:
        make_parser().parse_args(["slow-steps", *argv])
    assert ei.value.code == 2


def test_defaults():
    args = make_parser().parse_args(["slow-steps"])
    got = (args.service, args.since, args.top, args.json, args.jaeger, args.file, args.jaeger_ui)
    assert got == ("verl", 86400, 5, False, None, None, None)


# -- the CLI on Jaeger -------------------------------------------------------------------------------------
def _shift_to_recent(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    shift = time.time_ns() - 3600 * S - int(spans[0]["startTimeUnixNano"])
    for s in spans:
        s["startTimeUnixNano"] = str(int(s["startTimeUnixNano"]) + shift)
        s["endTimeUnixNano"] = str(int(s["endTimeUnixNano"]) + shift)
    return spans


def test_cli_on_jaeger(capsys):
    j = FakeJaeger({"/api/v3/traces": (200, v3_body(_shift_to_recent(many_steps(30, slow_step=17))))})
    try:
        assert run_cli("--jaeger", j.url + "/", "--top", "1", "--since", "3h") == 0
        out = capsys.readouterr().out
        assert "#1 step 17 " in out and f"{j.url}/trace/{0xABC000 + 17:032x}" in out
        assert "cause: update_actor 3.4\u00d7 its median (3.40s vs 1.00s, +2.40s)" in out
        q = j.queries[0][1]
        assert q["query.service_name"] == ["verl"] and q["query.operation_name"] == ["step"]
        assert run_cli("--jaeger", j.url, "--json", "--jaeger-ui", "https://ui.example") == 0
        assert json.loads(capsys.readouterr().out)[0]["link"].startswith("https://ui.example/trace/")
    finally:
        j.close()


def test_cli_jaeger_no_traces_and_unreachable(capsys):
    j = FakeJaeger({"/api/v3/traces": (404, b'{"error":{"httpCode":404,"message":"No traces found"}}')})
    try:
        assert run_cli("--jaeger", j.url, "--since", "30m") == 2
        err = capsys.readouterr().err
        assert err.strip() == ("verl-otel slow-steps: no step traces found for service 'verl' in the last 30m "
                               f"in Jaeger at {j.url}")
    finally:
        j.close()
    port = closed_port()
    assert run_cli("--jaeger", f"http://127.0.0.1:{port}") == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"verl-otel slow-steps: cannot reach Jaeger at http://127.0.0.1:{port}: ")


def test_main_dispatches_to_slow_steps(tmp_path, capsys, recent_spans):
    main = pytest.importorskip("verl_otel.cli.main").main  # written by someone else: wired if present
    f = tmp_path / "traces.jsonl"
    write_lines(f, recent_spans)
    assert main(["slow-steps", "--file", str(f), "--top", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["global_step"] == SLOW_STEP


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
        *[span(f"{'0' * 14}a{turn}", "0" * 15 + "4", sc.SPAN_ENGINE_REQUEST, turn * 2, turn * 2 + 2,
               **{sc.ENGINE_ATTR_QUEUE: 1.5, sc.ENGINE_ATTR_PREFILL: 0.1, sc.ENGINE_ATTR_DECODE: 0.4,
                  sc.ATTR_ENGINE_REPLICA: 1}) for turn in range(2)],
    ]
    (step,) = build_steps(spans)
    assert [s.index for s in step.samples] == [3, 4] and sc.SPAN_ENGINE_REQUEST not in step.phases
    slow, fast = step.samples
    assert fast.engine is None and slow.engine is not None
    assert (slow.engine.requests, slow.engine.replica) == (2, 1)
    assert (slow.engine.queue_s, slow.engine.prefill_s, slow.engine.decode_s) == pytest.approx((3.0, 0.2, 0.8))
    assert sample_text(slow) == ("#3 5.00s (worker 0, engine: queue 3.00s, prefill 0.20s, decode 0.80s in 2 requests, "
                                 "replica 1)")
    doc = to_json(rank([step], 1), None)[0]["slowest_samples"]
    assert doc[0]["engine"] == {"requests": 2, "queue_s": 3.0, "prefill_s": 0.2, "decode_s": 0.8, "replica": 1}
    assert doc[1]["engine"] is None
