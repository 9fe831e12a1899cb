"""Telemetry never hurts training, on the real verl CPU demo: the collector unreachable from the start,
answering slowly, going away mid-run and coming back (one run); an agent-loop worker killed mid-step (another). Training
must finish with every step (except where we kill it), with no traceback from verl-otel and warnings
logged once per process, not per item. (Step-time overhead is measured in bench/, not here.)"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections import Counter

import pytest

from helpers.otlp_receiver import OtlpReceiver, free_port
from helpers.traces import load_spans, steps
from helpers.verl_log import step_metrics
from helpers.verl_runs import start_demo

from verl_otel import semconv as sc
from verl_otel.cli.main import main

pytestmark = pytest.mark.verl


def _steps_logged(log: str) -> set[int]:
    return set(step_metrics(log))


def _assert_quiet(log: str) -> None:
    assert "Traceback" not in log, log[log.index("Traceback") - 500 : log.index("Traceback") + 2000]
    per_pid = Counter(
        m.group(1)
        for m in re.finditer(
            r"pid=(\d+)\)\S* .*(?:\[verl-otel\] WARNING|Transient error|"
            r"Failed to export)",
            log,
        )
    )
    assert all(n <= 6 for n in per_pid.values()), per_pid  # once per kind of failure, not per item


def test_collector_unreachable_slow_and_gone_mid_run(tmp_path):
    """One run, three collector faults: metrics to a port nobody listens on (unreachable from the start); traces
    to a collector answering every export 3 s late (OTLP/HTTP), which goes away once step 1's spans arrived and
    comes back 8 s later on the same port. Every step ends, and every step's span arrives (the ones of the
    outage once it is back, the last one flushed at fit end)."""
    rx = OtlpReceiver(delay_s=3.0).start()
    events: list[str] = []

    def chaos() -> None:
        got_first = rx.wait_for(lambda r: any(s.name == "step" for s in r.spans), timeout=400)
        events.append(f"first step seen: {got_first}")
        rx.stop()
        time.sleep(8)
        rx.start()  # same ports
        events.append("restarted")

    watcher = threading.Thread(target=chaos, daemon=True)
    watcher.start()
    try:
        run = start_demo(
            tmp_path,
            "legacy",
            3,
            ["update_actor@2=6"],
            scrape=False,
            extra_env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": rx.http_endpoint,  # /v1/traces appended (a signal's own is not)
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"http://127.0.0.1:{free_port()}/v1/metrics",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_METRIC_EXPORT_INTERVAL": "1000",
            },
        )
        watcher.join(30)
        log = run.log_tail(10**7)
        assert run.rc == 0, log[-3000:]
        assert _steps_logged(log) == {0, 1, 2, 3}
        assert events == ["first step seen: True", "restarted"], events
        # the run's last step arrived (flushed at fit end), and so did the others
        assert rx.wait_for(
            lambda r: any(s.name == "step" and s.attributes.get("verl.global_step") == 3 for s in r.spans), timeout=20
        )
        assert rx.wait_for(
            lambda r: {s.attributes.get("verl.global_step") for s in r.spans if s.name == "step"} >= {1, 2}, timeout=30
        )
        _assert_quiet(log)
    finally:
        rx.stop()


def test_worker_killed_mid_step_ends_trace_and_expires_gauges(tmp_path, capsys):
    """An agent-loop worker dies during step 2's rollout: verl fails the run, the step's trace still ends
    (ERROR), the dead worker's gauges go stale instead of freezing, and doctor names the lost worker first."""
    from helpers.prom import PromServer

    targets = tmp_path / "prometheus_targets.json"
    prom = PromServer(tmp_path / "prom", targets).start()
    killed: dict[str, object] = {}

    def killer() -> None:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            try:
                rows = prom.query('max(verl_training_step) == 2 and on() max(verl_phase_active{phase="rollout"}) == 1')
            except (OSError, ValueError):
                rows = []
            if rows:
                groups = json.loads(targets.read_text())
                worker = next(g for g in groups if g["labels"].get("verl_process_role") == "agent_loop_worker")
                instance = worker["targets"][0]
                before = prom.query(f'verl_rollout_samples_expected{{instance="{instance}"}}', time.time())
                if before:  # kill only once Prometheus holds the worker's gauges
                    killed.update(instance=instance, before=before)
                    killed["pid"] = int(worker["labels"]["__verl_otel_pid"])
                    os.kill(killed["pid"], signal.SIGKILL)  # type: ignore[arg-type]
                    killed["at"] = time.time()
                    return
            time.sleep(0.5)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    try:
        run = start_demo(tmp_path, "legacy", 3, ["rollout@2=15"], scrape=False)
        th.join(5)
        assert "at" in killed, "never saw step 2's rollout running"
        assert run.rc != 0, "verl fails the run when an agent-loop worker dies"
        by_step = steps(load_spans(tmp_path / "traces.jsonl"))
        assert by_step[1].root.status_error is False
        assert by_step[2].root.status_error is True, "the interrupted step's trace ends, marked ERROR"
        rollout = next(s for s in by_step[2].spans if s.name == "rollout")
        assert rollout.status_error
        assert killed["before"], "the worker's gauges were there before the kill"
        after = prom.query(f'verl_rollout_samples_expected{{instance="{killed["instance"]}"}}', killed["at"] + 6)
        assert after == [], "a dead worker's gauges expire (stale), they do not freeze"
        # doctor says first which process was lost (Ray's class of it, pid, host), in which step and phase
        capsys.readouterr()  # the demo's own lines
        assert main(["doctor", "--dir", str(tmp_path), "--json"]) == 0
        end = json.loads(capsys.readouterr().out)["run_end"]
        assert (end["reason"], end["pid"], end["step"]) == (sc.END_WORKER_LOST, killed["pid"], 2), end
        assert end["process_role"] == "AgentLoopWorker" and end["host"] and end["phase"] == sc.PHASE_ROLLOUT, end
        assert main(["doctor", "--dir", str(tmp_path)]) == 0
        text = capsys.readouterr().out
        assert text.startswith("run end:   a worker process was lost") and "in step 2, phase rollout" in text, text
        assert f"AgentLoopWorker pid {killed['pid']} on {end['host']}" in text, text
    finally:
        prom.stop()
