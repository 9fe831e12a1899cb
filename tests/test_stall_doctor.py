"""``verl-otel doctor`` and a killed run: a process SIGKILLed while it hangs keeps its evidence (the stall file and
the exported stall span), and doctor reads them back; on a run without a stall it says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers.procs import TESTS, clean_env
from helpers.traces import load_spans

from verl_otel import config as cfg
from verl_otel import semconv as sc
from verl_otel.cli.main import main


def _doctor(capsys, *args: str) -> tuple[int, str]:
    rc = main(["doctor", *args])
    return rc, capsys.readouterr().out


def test_a_killed_run_keeps_its_evidence_and_doctor_reads_it(tmp_path, capsys):
    data = tmp_path / "data"
    env = clean_env(
        VERL_OTEL_ENABLED="1",
        VERL_OTEL_DIR=str(data),
        VERL_OTEL_PROMETHEUS_PORT="",
        VERL_OTEL_STALL_SECONDS="1",
        VERL_OTEL_STALL_MIN_SECONDS="1",
    )
    proc = subprocess.Popen(
        [sys.executable, str(TESTS / "drive_stall.py")], env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        traces = data / sc.TRACES_FILE
        while time.monotonic() < deadline:
            if traces.exists() and '"stall"' in traces.read_text() and list((data / sc.STALLS_DIR).glob("*.txt")):
                break
            assert proc.poll() is None, "the process ended by itself"
            time.sleep(0.2)
        else:
            raise AssertionError("no stall evidence within 60 s")
        os.kill(proc.pid, signal.SIGKILL)  # no exit hook, no flush: what is there must already be there
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = proc.stdout.read() if proc.stdout else ""
    assert "[verl-otel] STALL: reward of step 7" in out and "score_with_remote_judge" in out
    [stall] = [s for s in load_spans(traces) if s.name == sc.SPAN_STALL]
    assert not any(s.name == sc.SPAN_STEP for s in load_spans(traces))  # the step never ended
    [evidence] = list((data / sc.STALLS_DIR).glob("*.txt"))
    assert evidence.name == f"step7-reward-trainer-{cfg.hostname()}-{proc.pid}.txt"
    rc, text = _doctor(capsys, "--dir", str(data), "--json")
    assert rc == 0
    [rec] = json.loads(text)["stalls"]
    assert rec["step"] == 7 and rec["phase"] == sc.PHASE_REWARD and rec["process_role"] == sc.PROCESS_ROLE_TRAINER
    assert rec["pid"] == proc.pid and rec["in_trace"] and rec["evidence"] == str(evidence)
    assert rec["frame"].startswith("score_with_remote_judge (drive_stall.py:")
    assert rec["kind"] == sc.STALL_REWARD and "timeout" in rec["advice"]
    assert stall.attributes[sc.ATTR_STALL_EVIDENCE] == str(evidence)
    rc, text = _doctor(capsys, "--dir", str(data))
    assert "1 stall in" in text and "step 7, phase reward" in text and "score_with_remote_judge" in text


def test_doctor_on_a_run_without_a_stall(tmp_path, capsys):
    (tmp_path / sc.TRACES_FILE).write_text("")
    rc, text = _doctor(capsys, "--dir", str(tmp_path))
    assert rc == 0 and "no stall in" in text and text.startswith("run end:   no step in the trace")
    rc, text = _doctor(capsys, "--dir", str(tmp_path), "--json")
    assert rc == 0 and json.loads(text) == {"run_end": None, "incidents": [], "stalls": []}


def test_doctor_on_a_missing_folder(tmp_path, capsys):
    rc = main(["doctor", "--dir", str(tmp_path / "nope")])
    assert rc == 2 and "is not a folder" in capsys.readouterr().err


def test_doctor_reads_repeats(tmp_path, capsys):
    stalls = tmp_path / sc.STALLS_DIR
    stalls.mkdir()
    head = f"{sc.STALL_FILE_MAGIC}\nphase: update_actor\ncall: worker.update_actor\nstep: 2\nframe: f (a.py:1)\n"
    body = "kind: collective\nrole: train_worker\npid: 5\nhost: h\n\nstacks\n"
    body += f"{sc.STALL_REPEAT_MARK} after 9s; innermost: f (a.py:1)\n"
    (stalls / "x.txt").write_text(head + body)
    (stalls / "other.txt").write_text("not ours\n")
    _, text = _doctor(capsys, "--dir", str(tmp_path), "--json")
    [rec] = json.loads(text)["stalls"]
    assert rec["repeats"] == 1 and rec["moved"] is False and "TORCH_NCCL" in rec["advice"]
    assert Path(rec["evidence"]).name == "x.txt"


def test_doctor_reads_stall_spans_from_jaeger(jaeger, capsys):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from helpers.step_spans import otlp_json

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    step = tracer.start_span(sc.SPAN_STEP, attributes={sc.ATTR_GLOBAL_STEP: 4})
    call = tracer.start_span("worker.update_actor", context=trace.set_span_in_context(step))
    attrs = {
        sc.ATTR_PHASE: sc.PHASE_UPDATE_ACTOR,
        sc.ATTR_STALL_CALL: "worker.update_actor",
        sc.ATTR_STALL_FRAME: "all_reduce (distributed_c10d.py:2500)",
        sc.ATTR_STALL_STACK: ["all_reduce (distributed_c10d.py:2500)", "update_actor (engine_workers.py:714)"],
        sc.ATTR_STALL_KIND: sc.STALL_COLLECTIVE,
        sc.ATTR_STALL_PROCESS_ROLE: sc.PROCESS_ROLE_WORKER,
        sc.ATTR_STALL_PID: 42,
        sc.ATTR_STALL_HOST: "node-3",
    }
    tracer.start_span(sc.SPAN_STALL, context=trace.set_span_in_context(call), attributes=attrs).end()
    call.end()
    step.end()
    doc = otlp_json(list(exporter.get_finished_spans()))
    j = jaeger({"/api/v3/traces": (200, json.dumps({"result": doc}).encode())})
    rc, text = _doctor(capsys, "--jaeger", j.url, "--json")
    [rec] = json.loads(text)["stalls"]
    assert rc == 0 and rec["step"] == 4 and rec["host"] == "node-3" and rec["kind"] == sc.STALL_COLLECTIVE
    assert "TORCH_NCCL" in rec["advice"] and j.queries[0][1]["query.operation_name"] == [sc.SPAN_STALL]
    rc, text = _doctor(capsys, "--jaeger", j.url)
    assert "train_worker pid 42 on node-3" in text and "<- update_actor (engine_workers.py:714)" in text


def test_doctor_reads_jaeger_a_page_at_a_time(capsys):
    """A long run's stalls: doctor walks Jaeger's window in pages (analysis/jaeger_pages.py), never one answer of
    the whole run, and finds every stall with its step."""
    from helpers.jaeger import FakeJaeger, Storage, _otlp_span

    from verl_otel.analysis.jaeger_pages import DEFAULT_PAGE_TRACES

    n, t0 = DEFAULT_PAGE_TRACES + 30, time.time() - 3600
    spans = []
    for step in range(1, n + 1):
        tid, start = 0xDEC000 + step, t0 + step * 10
        spans.append(_otlp_span(tid, step * 10, None, sc.SPAN_STEP, start, 9, {sc.ATTR_GLOBAL_STEP: step}))
        attrs = {sc.ATTR_PHASE: sc.PHASE_REWARD, sc.ATTR_STALL_KIND: sc.STALL_REWARD, sc.ATTR_STALL_PID: step}
        spans.append(_otlp_span(tid, step * 10 + 1, step * 10, sc.SPAN_STALL, start + 1, 0, attrs))
    storage = Storage(spans, "newest")
    j = FakeJaeger({"/api/v3/traces": storage.v3})
    try:
        rc, text = _doctor(capsys, "--jaeger", j.url, "--since", "2h", "--json")
    finally:
        j.close()
    got = json.loads(text)["stalls"]
    assert rc == 0 and sorted(r["step"] for r in got) == list(range(1, n + 1))
    assert all(r["pid"] == r["step"] for r in got)  # each stall with its own trace's step
    assert len(storage.answers) > 1 and max(storage.answers) <= DEFAULT_PAGE_TRACES, storage.answers
