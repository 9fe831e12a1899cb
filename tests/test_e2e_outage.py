"""Nothing is lost when the Collector is away for part of a real run: the CPU demo (real verl, several Ray
processes) pushes OTLP to a real receiver that answers UNAVAILABLE from the start until verl has logged
step 1, then accepts. The run ends as usual, every step's trace arrives whole (no span whose parent is
missing), nothing is dropped (the pushed verl_otel_dropped_total stays 0 for every export reason) and the
warnings come once per process, not per batch. One run, shared by the asserts below.

A second run has the receiver refuse spans until after the run (metrics are taken): the worker processes,
which Ray ends without ``atexit``, write theirs to ``unsent/`` at fit end, and ``verl-otel push`` delivers
every step's agent-loop samples and FSDP worker calls."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass

import grpc
import pytest

from helpers.otlp_receiver import OtlpReceiver
from helpers.outage import refused_until_after
from helpers.verl_log import step_metrics
from helpers.verl_runs import DemoRun, start_demo

from verl_otel import semconv as sc
from verl_otel.cli.main import main

pytestmark = pytest.mark.verl
STEPS = 3
OUTAGE_MIN_S = 3.0  # at least this long, and until verl logged step 1 (then update_actor@2 gives 8 s to drain)


@dataclass
class Outage:
    run: DemoRun
    rx: OtlpReceiver
    refused: int  # answers of UNAVAILABLE during the outage
    ended_ns: int  # wall clock when the receiver began to accept
    pushed: int  # spans `verl-otel push` delivered after the run (0 when the buffer sent them all)


@pytest.fixture(scope="module")
def outage(tmp_path_factory):
    rx = OtlpReceiver().start()
    rx.refuse = grpc.StatusCode.UNAVAILABLE
    out = tmp_path_factory.mktemp("demo-outage")
    ended: dict[str, int] = {}

    def end_outage() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and rx.refused == 0:
            time.sleep(0.2)
        first = time.monotonic()
        log = out / "demo.log"
        while time.monotonic() < deadline:
            done = log.exists() and 1 in step_metrics(log.read_text(errors="replace"))
            if done and time.monotonic() - first >= OUTAGE_MIN_S:
                break
            time.sleep(0.2)
        ended.update(refused=rx.refused, at=time.time_ns())
        rx.refuse = None

    watcher = threading.Thread(target=end_outage, daemon=True)
    watcher.start()
    try:
        run = start_demo(
            out,
            "legacy",
            STEPS,
            ["update_actor@2=8"],  # time after the outage for the buffers to drain while the run goes on
            scrape=False,
            extra_env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": rx.grpc_endpoint,
                "OTEL_METRIC_EXPORT_INTERVAL": "1000",
                "PYTHONUNBUFFERED": "1",  # the driver's log shows step 1 when it happens (ends the outage)
            },
        )
        watcher.join(60)
        pushed = 0
        if list((out / sc.UNSENT_DIR).glob("*.jsonl")):  # the run ended before everything was sent
            before = len(rx.received.spans)
            assert main(["push", "--dir", str(out), "--endpoint", rx.grpc_endpoint]) == 0
            pushed = len(rx.received.spans) - before
        yield Outage(run, rx, ended.get("refused", 0), ended.get("at", 0), pushed)
    finally:
        rx.stop()


def _log(o: Outage) -> str:
    return o.run.log_tail(10**7)


def test_the_run_ends_as_without_telemetry(outage):
    log = _log(outage)
    assert outage.run.rc == 0, log[-3000:]
    assert set(step_metrics(log)) == set(range(STEPS + 1))
    assert "Traceback" not in log, log[log.index("Traceback") - 500 : log.index("Traceback") + 2000]


def test_the_collector_refused_while_steps_ran(outage):
    assert outage.refused > 0 and outage.ended_ns > 0
    ended_before = [s for s in outage.rx.received.spans if s.name == sc.SPAN_STEP and s.end_ns < outage.ended_ns]
    assert ended_before, "no step ended during the outage: the test proves nothing"


def test_every_step_arrives_whole(outage):
    rx = outage.rx
    assert rx.wait_for(
        lambda r: (
            {s.attributes.get("verl.global_step") for s in r.spans if s.name == sc.SPAN_STEP}
            >= set(range(1, STEPS + 1))
        ),
        timeout=60,
    )
    with rx.received.lock:
        spans = list(rx.received.spans)
    ids = {s.span_id for s in spans}
    orphans = [(s.name, s.parent_id) for s in spans if s.parent_id and s.parent_id not in ids]
    assert orphans == [], orphans[:20]
    per_step = Counter(s.trace_id for s in spans)
    for step in (s for s in spans if s.name == sc.SPAN_STEP and s.attributes.get("verl.global_step")):
        assert per_step[step.trace_id] > 3, step.attributes  # the step and its phases (step 0: validation only)


def test_sent_during_the_run_once_the_collector_answered(outage):
    """The outage ended at step 1: the buffers drained while the run went on, nothing was left for push."""
    assert outage.pushed == 0
    assert "answers again" in _log(outage)


def _drop_points(r):
    reasons = (sc.DROP_EXPORT, sc.DROP_QUEUE, sc.DROP_BUFFER_FULL, sc.DROP_REJECTED, sc.DROP_WRITE)
    return [
        (labels.get(sc.LABEL_REASON), v)
        for name, labels, v in r.metric_points
        if name == sc.OTEL_DROPPED.otel_name and labels.get(sc.LABEL_REASON) in reasons
    ]


def test_nothing_dropped(outage):
    rx = outage.rx
    assert rx.wait_for(lambda r: len(_drop_points(r)) > 0, timeout=30)
    with rx.received.lock:
        nonzero = [p for p in _drop_points(rx.received) if p[1]]
    assert nonzero == []


def test_warned_once_per_process(outage):
    log = _log(outage)
    per_pid = Counter(m.group(1) for m in re.finditer(r"pid=(\d+)\)\S* .*\[verl-otel\] WARNING", log))
    assert all(n <= 6 for n in per_pid.values()), per_pid
    assert "cannot send spans to" in log  # the outage was said, once per process


# -- down until after the run ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def long_outage(tmp_path_factory):
    with refused_until_after(tmp_path_factory.mktemp("demo-long-outage"), "legacy", STEPS) as o:
        yield o


def test_push_delivers_the_workers_spans_of_every_step(long_outage):
    o = long_outage
    assert o.run.rc == 0, o.run.log_tail(3000)
    assert o.push_rc == 0 and len(o.files) >= 3, o.files  # the trainer's file and its workers'
    with o.rx.received.lock:
        spans = list(o.rx.received.spans)
    in_trace: dict[str, set[tuple[str, str]]] = {}  # trace -> (span name, process role)
    for s in spans:
        in_trace.setdefault(s.trace_id, set()).add((s.name, s.resource.get(sc.RES_PROCESS_ROLE, "")))
    for step in range(1, STEPS + 1):
        traces = [s.trace_id for s in spans if s.name == sc.SPAN_STEP and s.attributes.get("verl.global_step") == step]
        assert len(traces) == 1, (step, traces)
        seen = in_trace[traces[0]]
        assert (sc.SPAN_ROLLOUT_SAMPLE, sc.PROCESS_ROLE_AGENT_LOOP) in seen, (step, sorted(seen))  # agent-loop workers
        assert {n for n, role in seen if n.startswith("worker.") and role == sc.PROCESS_ROLE_WORKER}, (
            step,
            sorted(seen),
        )
    ids = {s.span_id for s in spans}
    assert [s.name for s in spans if s.parent_id and s.parent_id not in ids] == []


def test_push_left_nothing_and_nothing_was_dropped(long_outage):
    o = long_outage
    assert not list((o.run.out / sc.UNSENT_DIR).glob("*.jsonl"))
    assert o.rx.wait_for(lambda r: len(_drop_points(r)) > 0, timeout=30)
    with o.rx.received.lock:
        nonzero = [p for p in _drop_points(o.rx.received) if p[1]]
    assert nonzero == []
