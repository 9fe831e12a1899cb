"""Captures (export/captures.py, analysis/captures.py): a stalled call's process records a sampling profile of
itself while it is stuck, with the real py-spy (or its own stack sampling), bounded; `verl-otel capture` and
`doctor` print its hottest frames."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from verl_otel import semconv as sc
from verl_otel.analysis import captures
from verl_otel.analysis.otlp_json import read_file
from verl_otel.cli.main import main
from verl_otel.config import CaptureSettings
from verl_otel.export.captures import Captures
from verl_otel.export.stall_evidence import find_py_spy

# a trainer whose update_actor spins in a planted frame for 6 s: past the stall threshold (0.5 s), a capture of
# 2 s runs while it is still stuck; the script waits for the capture before it ends
_TRAINER = textwrap.dedent(
    """
    import time
    from verl_otel import runtime, trackers
    from verl_otel import semconv as sc
    from verl_otel.telemetry.steps import RunInfo

    def planted_busy_update():
        end, x = time.monotonic() + 6, 0
        while time.monotonic() < end:
            x += 1
        return x

    m = trackers.current()
    m.wire(sc.PROCESS_ROLE_TRAINER)
    steps = m.steps
    steps.fit_started(RunInfo("v1", "proj", "exp", 2, 4, 1), lambda: 1)
    steps.phase_enter(sc.VERL_TIMER_STEP)
    update = steps.phase_enter("update_actor")
    planted_busy_update()
    steps.phase_exit(update, None)
    steps.metrics_logged({"training/global_step": 1}, 1)
    steps.fit_ended(None)
    for t in runtime.current().stalls._capture.threads:
        t.join(30)
    """
)


@pytest.fixture(scope="module")
def stalled_run(tmp_path_factory) -> Path:
    if not find_py_spy():
        pytest.fail("py-spy is not installed (it is in the test extras)")
    data = tmp_path_factory.mktemp("captured")
    env = {
        "PATH": "/usr/bin:/bin",
        sc.ENV_DIR: str(data),
        sc.ENV_STALL_SECONDS: "0.5",
        sc.ENV_CAPTURE_SECONDS: "2",
        "VERL_OTEL_PROMETHEUS_PORT": "",
    }
    done = subprocess.run([sys.executable, "-c", _TRAINER], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return data


def test_a_stalled_call_is_captured_with_py_spy_while_it_is_stuck(stalled_run, capsys):
    (path,) = (stalled_run / sc.CAPTURES_DIR).glob(f"*{sc.CAPTURE_SUFFIX}")
    (evidence,) = (stalled_run / sc.STALLS_DIR).glob("*.txt")
    # named as the stall's evidence file (step, phase, role, host, pid), and the evidence names it
    assert path.name.removesuffix(sc.CAPTURE_SUFFIX) == evidence.stem and path.name.startswith("step1-update_actor-")
    assert f"capture: {path}" in evidence.read_text()
    got = captures.read(path)  # the stalled thread's profile: the capture opens on it
    assert got.thread.endswith('"MainThread"') and got.threads > 1, captures.to_text(got)
    assert got.samples > 20, got  # 2 s at 100 Hz
    assert got.innermost[0].frame.startswith("planted_busy_update ") and got.innermost[0].share > 0.5, got
    every = captures.summarize(json.loads(path.read_bytes()) | {sc.CAPTURE_FOCUS_KEY: False})
    assert every.thread == "" and every.samples > got.samples  # the other threads too (--idle)
    # on the trace: the stall span names the file, the stalled phase's span has the capture's event
    spans = read_file(stalled_run / sc.TRACES_FILE).spans
    (stall,) = [s for s in spans if s.name == sc.SPAN_STALL]
    assert stall.attributes[sc.ATTR_STALL_CAPTURE] == str(path)
    (update,) = [s for s in spans if s.name == "update_actor"]
    (event,) = [e for e in update.events if e.name == sc.EVENT_CAPTURE]
    assert event.attributes[sc.ATTR_CAPTURE_FILE] == str(path)
    assert event.attributes[sc.ATTR_CAPTURE_TOOL] == sc.CAPTURE_TOOL_PY_SPY
    assert main(["capture", str(path), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "hottest (innermost frame):" in out and "planted_busy_update" in out


def test_doctor_prints_the_captures_hottest_frames(stalled_run, capsys):
    assert main(["doctor", "--dir", str(stalled_run)]) == 0
    out = capsys.readouterr().out
    capture = out[out.index("   capture:   ") :]
    assert "samples; verl-otel capture FILE" in capture.splitlines()[0]
    assert "planted_busy_update" in "\n".join(capture.splitlines()[1:4]), out
    assert main(["doctor", "--dir", str(stalled_run), "--json"]) == 0
    (stall,) = json.loads(capsys.readouterr().out)["stalls"]
    assert stall["capture"].endswith(sc.CAPTURE_SUFFIX)


def test_slow_steps_names_the_capture_of_its_step_and_its_hottest_frames(stalled_run, capsys):
    (path,) = (stalled_run / sc.CAPTURES_DIR).glob(f"*{sc.CAPTURE_SUFFIX}")
    assert main(["slow-steps", "--file", str(stalled_run / sc.TRACES_FILE)]) == 0
    out = capsys.readouterr().out
    lines = out[out.index("   capture: ") :].splitlines()
    assert lines[0] == f"   capture: {path} ({sc.CAPTURE_TOOL_PY_SPY}, in update_actor)", out
    assert "planted_busy_update" in lines[1], out


def planted_wait(stop: threading.Event) -> None:
    while not stop.is_set():
        time.sleep(0.01)


def test_without_py_spy_the_process_samples_its_own_stacks(tmp_path):
    import os

    stop = threading.Event()
    waiter = threading.Thread(target=planted_wait, args=(stop,))
    waiter.start()
    try:
        caps = Captures(CaptureSettings(seconds=0.5), tmp_path, py_spy="")
        path, tool = caps.start("step3-ref-trainer-h-1", "ref", os.getpid(), waiter.ident) or ("", "")
        assert tool == sc.CAPTURE_TOOL_IN_PROCESS
        for t in caps.threads:
            t.join(10)
    finally:
        stop.set()
        waiter.join()
    got = captures.read(Path(path))
    assert got.thread == f'Thread {waiter.native_id} "{waiter.name}"' and got.samples >= 10, got
    assert "planted_wait" in [h.frame.split(" ")[0] for h in got.inclusive[:3]] + [
        h.frame.split(" ")[0] for h in got.innermost[:3]
    ], captures.to_text(got)


def test_captures_stop_at_their_bounds(tmp_path):
    now = [0.0]
    settings = CaptureSettings(seconds=0.05, max_per_process=3, max_per_phase=2, cooldown_s=10.0)
    caps = Captures(settings, tmp_path, py_spy="", clock=lambda: now[0])
    assert caps.start("a", "ref", 1)
    assert caps.start("b", "ref", 1) is None  # the cool-down
    now[0] = 10.0
    assert caps.start("c", "ref", 1)
    now[0] = 20.0
    assert caps.start("d", "ref", 1) is None  # two of a phase
    assert caps.start("e", "update_actor", 1)
    now[0] = 30.0
    assert caps.start("f", "values", 1) is None  # three of a process
    off = Captures(CaptureSettings(enabled=False), tmp_path, py_spy="")
    assert off.start("g", "ref", 1) is None
    for t in caps.threads:
        t.join(5)
    assert not list(tmp_path.iterdir()), "another pid's stacks are not this process' to sample"


def test_a_summary_of_a_speedscope_profile():
    doc = {
        "shared": {
            "frames": [
                {"name": "main", "file": "/x/run.py", "line": 1},
                {"name": "step", "file": "/x/run.py", "line": 9},
                {"name": "wait", "file": "/x/lock.py", "line": 3},
                {"name": "spin"},
            ]
        },
        "profiles": [
            {"type": "sampled", "name": 'Thread 12 "a"', "samples": [[0, 1, 2]] * 3 + [[0, 3]], "weights": [1] * 4},
            {"type": "sampled", "name": 'Thread 13 "b"', "samples": [[0, 3], [0, 3], "bad", []], "weights": [2, 1]},
            {"type": "evented", "name": "ignored"},
        ],
    }
    got = captures.summarize(doc, "p")
    assert (got.samples, got.threads) == (6, 2)  # weighted: "spin" 4 of 7, "wait" 3 of 7
    assert [(h.frame, round(h.share, 3)) for h in got.innermost] == [("spin", 0.571), ("wait (lock.py:3)", 0.429)]
    # `main` is under every sample: it says nothing and is left out
    assert got.inclusive[0].frame == "spin" and {h.frame for h in got.inclusive[1:]} == {
        "step (run.py:9)",
        "wait (lock.py:3)",
    }
    one = captures.summarize(doc, "p", thread=12)
    assert one.thread == 'Thread 12 "a"' and one.samples == 4
    marked = captures.summarize({**doc, "activeProfileIndex": 1, sc.CAPTURE_FOCUS_KEY: True})
    assert marked.thread == 'Thread 13 "b"' and [h.frame for h in marked.innermost] == ["spin"]
    with pytest.raises(captures.CaptureError):
        captures.summarize({"frames": []})


def test_the_cli_says_what_is_wrong_with_a_file(tmp_path, capsys):
    bad = tmp_path / "x.speedscope.json"
    bad.write_text("{not json")
    assert main(["capture", str(bad)]) == 2
    assert "not JSON" in capsys.readouterr().err
    assert main(["capture", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_own_stack_sampler_stops_at_its_frame_bound():
    from verl_otel.export.captures import sample_own_stacks

    stop = threading.Event()
    waiter = threading.Thread(target=planted_wait, args=(stop,))
    waiter.start()
    started = time.monotonic()
    try:
        doc = sample_own_stacks(30.0, 100, max_frames=50)  # 30 s asked: the bound ends it after a few samples
    finally:
        stop.set()
        waiter.join()
    held = sum(len(stack) for p in doc["profiles"] for stack in p["samples"])
    assert 50 <= held < 50 + 256 * 8, held
    assert time.monotonic() - started < 10
