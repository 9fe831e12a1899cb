"""The step summary (telemetry/step_summary.py, analysis/step_summary.py): the trainer writes one small root span
per step that says what the step's whole trace says of its phases, tokens and attributes, and the Jaeger readers
rank from those and read whole only the traces they show."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from helpers.trainer_steps import trainer_steps

from verl_otel import semconv as sc
from verl_otel.analysis.otlp_json import read_file
from verl_otel.analysis.step_summary import from_summary, steps_from_summaries
from verl_otel.analysis.step_traces import Span, build_steps


def _run(tmp_path, monkeypatch, steps: int = 3) -> list[Span]:
    """A trainer process' steps as the hooks drive the step tracer, written to the embedded default's file."""
    with trainer_steps(tmp_path, monkeypatch, steps) as (m, number):
        tracer = m.steps
        for step in range(1, steps + 1):
            number[0] = step
            tracer.phase_enter(sc.VERL_TIMER_STEP)
            gen = tracer.phase_enter("gen")
            tracer.tokens_seen(100 * step, 400 * step)
            tracer.phase_exit(gen, None)
            for _ in range(2 if step == 2 else 1):  # a phase that runs twice in a step
                tracer.phase_exit(tracer.phase_enter("old_log_prob"), None)
            update = tracer.phase_enter("update_actor")
            tracer.phase_exit(update, RuntimeError("boom") if step == 3 else None)
            tracer.metrics_logged({"training/global_step": step}, step)
    return read_file(tmp_path / sc.TRACES_FILE).spans


def test_a_summary_says_what_the_whole_trace_says(tmp_path, monkeypatch):
    spans = _run(tmp_path, monkeypatch)
    full = {s.trace_id: s for s in build_steps(spans)}
    light = steps_from_summaries(spans)
    assert [s.global_step for s in light] == [1, 2, 3] and len(full) == 3
    summaries = [s for s in spans if s.name == sc.SPAN_STEP_SUMMARY]
    for summary, step in zip(summaries, light, strict=True):
        whole = full[step.trace_id]  # the summary names its step's trace, in an attribute and a link
        assert summary.trace_id != step.trace_id and not summary.parent_id
        assert [link.trace_id for link in summary.links] == [step.trace_id]
        assert step.summarized and not whole.summarized
        assert (step.start_ns, step.global_step, step.error) == (whole.start_ns, whole.global_step, whole.error)
        assert step.seconds == pytest.approx(whole.seconds, abs=1e-3)
        assert step.phases.keys() == whole.phases.keys() and step.phase_runs == whole.phase_runs
        assert all(step.phases[p] == pytest.approx(whole.phases[p], abs=5e-3) for p in whole.phases)
        assert step.tokens == whole.tokens and step.tokens  # the token phases, summed over their runs
        assert step.attributes == whole.attributes
    assert full[light[1].trace_id].phase_runs["old_log_prob"] == 2
    assert [s.error for s in light] == [False, False, True]
    # the file readers see steps only: the summary's trace is not one more step
    assert len(build_steps(spans)) == 3


def test_a_broken_or_foreign_summary_is_skipped_or_read_in_part():
    base = {"trace_id": "a" * 32, "span_id": "b" * 16, "parent_id": "", "start_ns": 0, "end_ns": 10**9}
    good = {
        sc.ATTR_SUMMARY_TRACE_ID: "C" * 32,
        sc.ATTR_GLOBAL_STEP: 4,
        # Jaeger's legacy API gives an array tag as its JSON text
        sc.ATTR_SUMMARY_PHASES: json.dumps(["gen", "adv", 7]),
        sc.ATTR_SUMMARY_PHASE_SECONDS: [1.5, "x"],
        sc.ATTR_SUMMARY_PHASE_RUNS: [2],
        sc.ATTR_SUMMARY_PHASE_TOKENS: "not json",
    }
    step = from_summary(Span(name=sc.SPAN_STEP_SUMMARY, attributes=good, **base))
    assert step is not None and step.trace_id == "c" * 32 and step.global_step == 4
    assert step.phases == {"gen": 1.5} and step.phase_runs == {"gen": 2} and step.tokens == {}
    assert sc.ATTR_SUMMARY_PHASES not in step.attributes and step.attributes[sc.ATTR_GLOBAL_STEP] == 4
    assert from_summary(Span(name=sc.SPAN_STEP, attributes=good, **base)) is None
    no_trace = {**good, sc.ATTR_SUMMARY_TRACE_ID: 5}
    assert from_summary(Span(name=sc.SPAN_STEP_SUMMARY, attributes=no_trace, **base)) is None
    stopped = {**good, sc.ATTR_STOPPED: True}
    assert from_summary(Span(name=sc.SPAN_STEP_SUMMARY, attributes=stopped, **base)) is None


def _v3(tmp_path, keep) -> bytes:
    """The trace file's spans that ``keep`` holds, as one Jaeger /api/v3 answer (OTLP/JSON, as the file is)."""
    out = []
    for line in (tmp_path / sc.TRACES_FILE).read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                spans = [sp for sp in ss["spans"] if keep(sp)]
                if spans:
                    out.append({**rs, "scopeSpans": [{**ss, "spans": spans}]})
    return json.dumps({"result": {"resourceSpans": out}}).encode()


def test_slow_steps_from_jaeger_reads_whole_only_the_steps_it_shows(tmp_path, monkeypatch, jaeger):
    """A Jaeger answering the summaries' search and single traces by id: slow-steps searches for no step trace,
    and reads whole the --top steps' traces only."""
    from verl_otel.cli.main import main

    spans = _run(tmp_path, monkeypatch)
    summaries = {s.trace_id for s in spans if s.name == sc.SPAN_STEP_SUMMARY}
    searched: list[str] = []
    read: list[str] = []

    def search(path, query):
        operation = query.get("query.operation_name", [""])[0]
        searched.append(operation)
        if operation != sc.SPAN_STEP_SUMMARY:
            return (404, b'{"error":{"httpCode":404,"message":"No traces found"}}', "text/plain")
        return 200, _v3(tmp_path, lambda sp: sp["traceId"] in summaries)

    def one(path, query):
        trace_id = path.rsplit("/", 1)[1]
        read.append(trace_id)
        return 200, _v3(tmp_path, lambda sp: sp["traceId"] == trace_id)

    server = jaeger({"/api/v3/traces": search, "/api/v3/traces/": one})
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["slow-steps", "--jaeger", server.url, "--since", "2d", "--top", "1", "--json"])
    assert rc == 0, out.getvalue()
    (shown,) = json.loads(out.getvalue())
    assert set(searched) == {sc.SPAN_STEP_SUMMARY}
    assert read == [shown["trace_id"]] and shown["trace_id"] not in summaries  # the one step shown, read whole
    whole = {s.trace_id: s for s in build_steps(spans)}[shown["trace_id"]]
    assert shown["global_step"] == whole.global_step and shown["duration_s"] == pytest.approx(whole.seconds, abs=2e-3)
