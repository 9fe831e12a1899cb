"""Chaos on the real verl CPU demo: whatever the telemetry's surroundings do, the run ends as it would
without telemetry (same exit code, same steps), within VERL_OTEL_SHUTDOWN_TIMEOUT + 10% of the clean
run's wall time, with drops counted and no verl-otel traceback.

Faults: a collector that resets every connection and one that answers garbage, both then never answering (one
run); a trace directory that does not answer (a FIFO) and one that is full (a tmpfs with 8 KB left); OTEL_* values
the SDK rejects and non-finite numbers in our settings; an FSDP worker killed mid-run (compared with the same kill
in a run without telemetry).

Each run is a 2-step legacy GRPO run (~1-2 min on 2 cores): 6 runs. The issue's bound, ``1.1 x clean + timeout``,
is checked on verl's ``fit()`` as the demo's plugin times it (with ``FIT_JITTER_S`` for a 2-step fit's noise);
the whole run's wall time includes Ray's start-up, which varies by tens of seconds on a loaded machine, and
gets ``RAY_JITTER_S`` on top: enough for that, not for a hang at exit."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.bad_collectors import BadCollector
from helpers.procs import clean_env
from helpers.verl_log import step_metrics

from verl_otel import semconv as sc
from verl_otel.demo.slow import ENV_FIT_TIMES

pytestmark = pytest.mark.verl

STEPS = 2
SHUTDOWN_TIMEOUT = 5.0
FIT_JITTER_S = 3.0
RAY_JITTER_S = 45.0


@dataclass
class Run:
    rc: int
    wall: float  # the whole run, Ray's start-up included
    fit: float  # verl's fit(), as the demo's plugin measured it (our fit-end wait included)
    log: str
    steps: set[int]


def _run(
    out: Path, extra_env: dict[str, str], slow: list[str] | None = None, killer: threading.Thread | None = None
) -> Run:
    """One demo run; ``killer``: a thread started with it, which acts on the run from outside."""
    from verl_otel.demo.runner import run_demo

    out.mkdir(parents=True, exist_ok=True)
    old, env = dict(os.environ), clean_env()  # read before the clear (else the runs get an empty environment)
    os.environ.clear()
    os.environ.update(env)
    try:
        if killer is not None:
            killer.start()
        t0 = time.monotonic()
        rc = run_demo(
            steps=STEPS,
            out=out,
            trainer="legacy",
            slow=slow or [],
            quiet=True,
            extra_env={
                "VERL_OTEL_SHUTDOWN_TIMEOUT": str(SHUTDOWN_TIMEOUT),
                ENV_FIT_TIMES: str(out / "fit_seconds"),
                **extra_env,
            },
        )
        wall = time.monotonic() - t0
    finally:
        os.environ.clear()
        os.environ.update(old)
    log = (out / "demo.log").read_text(errors="replace")
    fits = (out / "fit_seconds").read_text().split() if (out / "fit_seconds").exists() else []
    return Run(rc, wall, float(fits[-1]) if fits else float("nan"), log, set(step_metrics(log)))


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> Run:
    run = _run(tmp_path_factory.mktemp("chaos-clean"), {"VERL_OTEL_ENABLED": "0"})
    assert run.rc == 0 and run.steps == set(range(STEPS + 1)), run.log[-3000:]
    assert "[verl-otel]" not in run.log, "telemetry is off in the clean run"
    return run


def _assert_in_time(run: Run, clean: Run) -> None:
    """fit() within VERL_OTEL_SHUTDOWN_TIMEOUT + 10% of the clean run's (plus a little for a 2-step fit's
    own noise on 2 cores); the whole run, Ray's start-up included, within a looser bound that still
    catches a hang at exit."""
    assert run.fit <= clean.fit * 1.1 + SHUTDOWN_TIMEOUT + FIT_JITTER_S, (run.fit, clean.fit)
    assert run.wall <= clean.wall * 1.1 + SHUTDOWN_TIMEOUT + RAY_JITTER_S, (run.wall, clean.wall)


def _assert_like_clean(run: Run, clean: Run) -> None:
    assert run.rc == clean.rc, run.log[-3000:]
    assert run.steps == clean.steps, (run.steps, clean.steps)
    _assert_in_time(run, clean)
    assert not _our_tracebacks(run.log), _our_tracebacks(run.log)[0]


def _our_tracebacks(log: str) -> list[str]:
    """Tracebacks raised in verl-otel's own code: the innermost frame is ours (verl's exceptions pass
    through our wrappers' frames on their way out, which is theirs to raise; the demo's stand-ins are
    verl's side here)."""
    ours = []
    for part in log.split("Traceback (most recent call last)")[1:]:
        frames = re.findall(r'File "([^"]+)"', "\n".join(part.splitlines()[:80]))
        if frames and re.search(r"/verl_otel/(?!demo/)", frames[-1]):
            ours.append("\n".join(part.splitlines()[:60]))
    return ours


def _tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )


BAD_SETTINGS = {
    "OTEL_BSP_MAX_QUEUE_SIZE": "64",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "512",  # the SDK raises on these
    "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd",
    "OTEL_SPAN_EVENT_COUNT_LIMIT": "many",
    "VERL_OTEL_MAX_TEXT": "1e999",
    "VERL_OTEL_SAMPLE_SPANS": "inf",
    "VERL_PROGRESS_LOG": "1",
    "VERL_PROGRESS_LOG_INTERVAL": "nan",
    "VERL_PROGRESS_BAR_INTERVAL": "-inf",
}


def _broken_then_silent(traces: BadCollector, metrics: BadCollector, settle_s: float = 2.0) -> threading.Thread:
    """Once both collectors were reached (the trace exporter resets, the metric exporter reads garbage) and
    ``settle_s`` more went by, both stop answering at all for the rest of the run: its end, the exporters' last
    flush against a collector that never answers, is the case that tests the shutdown bound."""

    def switch() -> None:
        deadline, first = time.monotonic() + 600, None
        while time.monotonic() < deadline:
            if traces.connections and metrics.connections:
                first = first or time.monotonic()
                if time.monotonic() - first >= settle_s:
                    traces.become("blackhole")
                    metrics.become("blackhole")
                    return
            time.sleep(0.5)

    return threading.Thread(target=switch, daemon=True)


def test_broken_collector(tmp_path, clean_run):
    """One run through three broken collectors: every trace export reset and garbage answered to every metric
    export, then a collector that never answers either (to the run's end); the SDK-rejected settings and
    non-finite numbers ride along."""
    with BadCollector("reset") as bad_traces, BadCollector("garbage") as bad_metrics:
        run = _run(
            tmp_path,
            {
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": bad_traces.endpoint,
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": bad_metrics.endpoint,
                "OTEL_METRIC_EXPORT_INTERVAL": "1000",
                **BAD_SETTINGS,
            },
            killer=_broken_then_silent(bad_traces, bad_metrics),
        )
        seen = {"traces": dict(bad_traces.seen), "metrics": dict(bad_metrics.seen)}
    # the exporters did try each kind
    assert set(seen["traces"]) == {"reset", "blackhole"} and set(seen["metrics"]) == {"garbage", "blackhole"}, seen
    _assert_like_clean(run, clean_run)
    assert "cannot send spans to" in run.log or "Failed to export" in run.log, run.log[-3000:]
    for name in ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "VERL_OTEL_MAX_TEXT", "VERL_PROGRESS_LOG_INTERVAL"):
        assert name in run.log, name
    assert "[VERL_PROGRESS]" in run.log, "the seed's lines still print with their defaults"


def test_unresponsive_trace_directory(tmp_path, clean_run):
    data = tmp_path / "otel"
    data.mkdir()
    os.mkfifo(data / "traces.jsonl")
    run = _run(tmp_path / "demo", {"VERL_OTEL_DIR": str(data)})
    _assert_like_clean(run, clean_run)
    assert "cannot write traces" in run.log


def test_full_trace_directory(tmp_path, clean_run):
    data = tmp_path / "otel"
    if not _tmpfs(data, "1m"):
        pytest.skip("cannot mount a small tmpfs here (not root, or no mount permission)")
    try:
        st = os.statvfs(data)  # fill it, leaving 8 KB: the file_sd list fits, the run's spans do not
        (data / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 8192))
        run = _run(tmp_path / "demo", {"VERL_OTEL_DIR": str(data)})
    finally:
        subprocess.run(["umount", "-l", str(data)], capture_output=True)
    _assert_like_clean(run, clean_run)
    assert "the disk is full" in run.log and "write_failed" in run.log, run.log[-3000:]


_UPDATING = re.compile(r"ray::WorkerDict\.\S*update_actor")


def _ours() -> list[tuple[int, str]]:
    """(pid, args) of this test's own descendants: the demo and the Ray it starts. Other runs on the machine
    (another checkout's tests) have processes of the same titles, which this test must not kill."""
    ps = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
    rows = [line.split(None, 2) for line in ps.splitlines()[1:]]
    children: dict[int, list[tuple[int, str]]] = {}
    for row in rows:
        if len(row) == 3:
            children.setdefault(int(row[1]), []).append((int(row[0]), row[2]))
    found, todo = [], [os.getpid()]
    while todo:
        for pid, args in children.get(todo.pop(), []):
            found.append((pid, args))
            todo.append(pid)
    return sorted(found)


def _killer(pattern: str, killed: dict) -> threading.Thread:
    """Kill the first of our processes whose title matches ``pattern`` while step 1's actor update runs (made
    6 s long): Ray's process titles say so with or without telemetry (verl's own step lines reach the log
    only when its stdout is flushed, which without telemetry is at exit)."""

    def kill() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            ours = _ours()
            if any(_UPDATING.search(args) for _, args in ours):
                pids = [pid for pid, args in ours if re.search(pattern, args)]
                if pids:
                    os.kill(pids[0], signal.SIGKILL)
                    killed["pid"] = pids[0]
                    return
            time.sleep(0.3)

    return threading.Thread(target=kill, daemon=True)


@pytest.mark.parametrize("pattern", [r"ray::WorkerDict"])
def test_killed_worker_ends_the_run_as_without_telemetry(tmp_path, pattern, capsys):
    """verl fails the run when one of its FSDP workers dies; with telemetry on it fails the same way, no later.
    (An agent-loop worker killed between rollouts did not end verl's run the same way twice in a row with or
    without telemetry, so it is not compared here; tests/test_e2e_faults.py kills one mid-rollout.)
    ``doctor`` on the run with telemetry says first that a worker was lost: its pid and class, the step and phase."""
    runs, kills = {}, {}
    for telemetry in ("0", "1"):
        out = tmp_path / f"telemetry-{telemetry}"
        killed: dict = {}
        runs[telemetry] = _run(
            out, {"VERL_OTEL_ENABLED": telemetry}, slow=["update_actor@1=6"], killer=_killer(pattern, killed)
        )
        assert killed, f"never found {pattern} to kill (telemetry={telemetry})"
        kills[telemetry] = killed["pid"]
    clean, run = runs["0"], runs["1"]
    assert run.rc == clean.rc != 0, (run.rc, clean.rc)
    assert run.steps == clean.steps
    _assert_in_time(run, clean)
    assert not _our_tracebacks(run.log), _our_tracebacks(run.log)[0]
    from verl_otel.cli.main import main

    capsys.readouterr()
    assert main(["doctor", "--dir", str(tmp_path / "telemetry-1"), "--json"]) == 0
    end = json.loads(capsys.readouterr().out)["run_end"]
    assert end["reason"] == sc.END_WORKER_LOST, (end["detail"], end["frames"])
    assert end["pid"] == kills["1"] and end["process_role"] == "WorkerDict", end
    assert (end["step"], end["phase"]) == (1, sc.PHASE_UPDATE_ACTOR), end
    assert main(["doctor", "--dir", str(tmp_path / "telemetry-1")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("run end:   a worker process was lost") and f"WorkerDict pid {kills['1']}" in text
