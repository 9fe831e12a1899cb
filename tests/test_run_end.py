"""A run that ends badly keeps its open step and explains itself (issue 39): a trainer process signalled mid-step
and SIGKILLed moments later (as Ray ends its workers), its own SIGTERM handler still obeyed, a worker lost under a
phase, a clean end; ``doctor`` says first how the run ended. The processes are real (tests/drive_abrupt.py, the
runtime and step tracer as the hooks drive them); the end watch itself is tested in this process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers.procs import ROOT, clean_env
from helpers.traces import load_spans

from verl_otel import semconv as sc
from verl_otel.cli.main import main
from verl_otel.export.run_end import wait_ack, write_note
from verl_otel.process.ends import EndWatch

# Ray SIGKILLs a worker ~7 ms after its SIGTERM on an idle machine (what the watch beats in the real runs:
# tests/test_e2e_run_end.py); here a margin for a loaded machine: the exit hooks never run either way
KILL_AFTER_S = 0.5


def _drive(data: Path, mode: str, sig: int | None = None, kill_after_s: float = KILL_AFTER_S, **env_extra: str) -> int:
    env = {**clean_env(), "VERL_OTEL_ENABLED": "1", sc.ENV_DIR: str(data), "VERL_OTEL_PROMETHEUS_PORT": "0"}
    env.update(env_extra)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "drive_abrupt.py"), mode], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        if sig is not None:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "IN_STEP"
            proc.send_signal(sig)
            time.sleep(kill_after_s)
            if proc.poll() is None:
                proc.kill()
        return proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()


def _doctor(capsys, data: Path) -> tuple[dict, str]:
    assert main(["doctor", "--dir", str(data), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["doctor", "--dir", str(data)]) == 0
    return doc["run_end"], capsys.readouterr().out


def _step_and_phases(data: Path) -> tuple:
    spans = load_spans(data / sc.TRACES_FILE)
    [step] = [s for s in spans if s.name == sc.SPAN_STEP]
    by_name = {s.name: s for s in spans}
    return step, by_name


def test_sigterm_then_sigkill_keeps_the_open_step(tmp_path, capsys):
    rc = _drive(tmp_path, "signal", signal.SIGTERM)
    # SIGKILLed (before any exit hook: only the end watch wrote the step), or its own handler ended it first (a
    # loaded machine: the main thread got to it) and the exit waited for the watch
    assert rc in (-signal.SIGKILL, 3)
    step, spans = _step_and_phases(tmp_path)
    update = spans[sc.PHASE_UPDATE_ACTOR]
    assert step.status_error and update.status_error and not spans[sc.PHASE_ROLLOUT].status_error
    assert step.attributes[sc.ATTR_RUN_END_REASON] == update.attributes[sc.ATTR_RUN_END_REASON] == sc.END_TERMINATED
    assert step.attributes[sc.ATTR_RUN_END_PHASE] == sc.PHASE_UPDATE_ACTOR
    assert step.attributes[sc.ATTR_RUN_END_DETAIL] == "SIGTERM" and step.attributes[sc.ATTR_GLOBAL_STEP] == 2
    end, text = _doctor(capsys, tmp_path)
    assert end["reason"] == sc.END_TERMINATED and end["phase"] == sc.PHASE_UPDATE_ACTOR and end["step"] == 2
    assert (
        end["process_role"] == sc.PROCESS_ROLE_TRAINER and end["pid"] == step.resource[sc.RES_PID] and not end["clean"]
    )
    assert text.startswith("run end:   terminated (SIGTERM") and "in step 2, phase update_actor" in text


def test_an_otlp_run_leaves_the_open_step_in_unsent(tmp_path):
    """Pushing to a collector that is not there: the open step cannot be sent before the SIGKILL, so it waits in
    unsent/ for ``verl-otel push``."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    assert _drive(tmp_path, "signal", signal.SIGTERM, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint) in (-signal.SIGKILL, 3)
    spans = [s for path in (tmp_path / sc.UNSENT_DIR).glob("*.jsonl") for s in load_spans(path)]
    [step] = [s for s in spans if s.name == sc.SPAN_STEP]
    assert step.attributes[sc.ATTR_RUN_END_REASON] == sc.END_TERMINATED and step.status_error
    assert sc.PHASE_UPDATE_ACTOR in {s.name for s in spans}


def test_sigint_to_the_driver_makes_the_trainers_sigterm_an_interrupt(tmp_path, capsys):
    """Ctrl-C reaches the driver (it leaves a note); Ray then ends the trainer with SIGTERM."""
    write_note(tmp_path, "SIGINT", sc.PROCESS_ROLE_DRIVER)
    assert _drive(tmp_path, "signal", signal.SIGTERM) in (-signal.SIGKILL, 3)
    step, _ = _step_and_phases(tmp_path)
    assert step.attributes[sc.ATTR_RUN_END_REASON] == sc.END_INTERRUPTED
    assert step.attributes[sc.ATTR_RUN_END_PROCESS_ROLE] == sc.PROCESS_ROLE_DRIVER
    assert step.attributes[sc.ATTR_DEPRECATED_RUN_END_ROLE] == sc.PROCESS_ROLE_DRIVER  # the old key, for a release
    assert step.attributes[sc.ATTR_RUN_END_PID] == os.getpid()  # the note's writer: this process
    end, text = _doctor(capsys, tmp_path)
    assert end["reason"] == sc.END_INTERRUPTED and [n["signal"] for n in end["notes"]] == ["SIGINT"]
    assert text.startswith("run end:   interrupted") and f"SIGINT reached the driver pid {os.getpid()}" in text


def _note_acked(data: Path, mode: str, signal_name: str) -> tuple:
    """drive_abrupt.py ``mode`` in step 2; a driver's ``signal_name`` note is left, and the trainer must ack it (it
    wrote its open step) while nothing signals it. Its step and phases, once it is killed."""
    env = {**clean_env(), "VERL_OTEL_ENABLED": "1", sc.ENV_DIR: str(data), "VERL_OTEL_PROMETHEUS_PORT": "0"}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "drive_abrupt.py"), mode], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "IN_STEP"
        note = write_note(data, signal_name, sc.PROCESS_ROLE_DRIVER)
        assert note is not None and wait_ack(note, 5.0), "the trainer never acked the driver's note"
    finally:
        proc.kill()
        proc.wait(30)
    return _step_and_phases(data)


def test_the_drivers_ctrl_c_is_read_before_ray_ends_the_trainer(tmp_path, capsys):
    """Ctrl-C reaches the driver, which leaves a note and waits (2 s at most) for the trainer to write its open step
    before it goes on to end (Ray's shutdown then kills the trainer): here nothing signals the trainer at all."""
    step, spans = _note_acked(tmp_path, "signal", "SIGINT")
    assert step.attributes[sc.ATTR_RUN_END_REASON] == sc.END_INTERRUPTED
    assert spans[sc.PHASE_UPDATE_ACTOR].attributes[sc.ATTR_RUN_END_PROCESS_ROLE] == sc.PROCESS_ROLE_DRIVER


def test_a_trainer_off_the_main_thread_reads_the_drivers_note(tmp_path):
    """fully_async's trainer is an async Ray actor: its fit() runs on a thread of Ray's, where the signal watch
    cannot be installed. A thread of the watch's own still reads the driver's note and writes the open step."""
    step, spans = _note_acked(tmp_path, "thread", "SIGTERM")
    assert step.attributes[sc.ATTR_RUN_END_REASON] == sc.END_TERMINATED
    assert spans[sc.PHASE_UPDATE_ACTOR].attributes[sc.ATTR_RUN_END_PROCESS_ROLE] == sc.PROCESS_ROLE_DRIVER


def test_sigint_to_the_trainer(tmp_path):
    assert _drive(tmp_path, "signal", signal.SIGINT) in (-signal.SIGKILL, -signal.SIGINT)  # or its KeyboardInterrupt
    step, spans = _step_and_phases(tmp_path)
    assert step.attributes[sc.ATTR_RUN_END_REASON] == sc.END_INTERRUPTED
    assert spans[sc.PHASE_UPDATE_ACTOR].attributes[sc.ATTR_RUN_END_DETAIL] == "SIGINT"


def test_the_process_own_handler_still_ends_it(tmp_path):
    """The watch changes no handler: the process' SIGTERM handler (as Ray's) still exits, with its own code, and
    the step is written once."""
    assert _drive(tmp_path, "exit", signal.SIGTERM, kill_after_s=5.0) == 3
    step, _ = _step_and_phases(tmp_path)  # one step span: the exit path did not write it again
    assert step.attributes[sc.ATTR_RUN_END_REASON] == sc.END_TERMINATED


def test_a_lost_worker_is_named(tmp_path, capsys):
    assert _drive(tmp_path, "lost") == 1
    step, spans = _step_and_phases(tmp_path)
    assert step.attributes[sc.ATTR_RUN_END_REASON] == sc.END_WORKER_LOST
    assert spans[sc.PHASE_UPDATE_ACTOR].attributes[sc.ATTR_RUN_END_REASON] == sc.END_WORKER_LOST
    end, text = _doctor(capsys, tmp_path)
    assert (end["process_role"], end["pid"], end["host"], end["phase"]) == (
        "WorkerDict",
        4242,
        "10.0.0.7",
        "update_actor",
    )
    assert "SYSTEM_ERROR" in end["detail"] and end["frames"], end
    assert text.startswith("run end:   a worker process was lost") and "WorkerDict pid 4242 on 10.0.0.7" in text


def test_a_clean_end_says_so(tmp_path, capsys):
    assert _drive(tmp_path, "clean") == 0
    end, text = _doctor(capsys, tmp_path)
    assert end["clean"] and end["step"] == 2 and end["reason"] == ""
    assert text.startswith("run end:   clean: the last step (step 2)")


def test_the_watch_passes_every_signal_on_and_uninstalls():
    """The wakeup fd that was there (asyncio's) still gets every signal; uninstall puts it back."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    old_handler = signal.signal(signal.SIGUSR1, lambda *_: None)  # a Python handler: its signals reach the fd
    before = signal.set_wakeup_fd(w)
    watch = EndWatch()
    try:
        assert watch.install() and watch.installed
        os.kill(os.getpid(), signal.SIGUSR1)
        assert os.read(r, 8) == bytes([signal.SIGUSR1])  # passed on by the watch's thread
        watch.uninstall()
        assert signal.set_wakeup_fd(w) == w  # ours again
    finally:
        signal.set_wakeup_fd(before)
        signal.signal(signal.SIGUSR1, old_handler)
        os.close(r)
        os.close(w)


def test_the_watch_stays_off_outside_the_main_thread():
    import threading

    got: list[bool] = []
    th = threading.Thread(target=lambda: got.append(EndWatch().install()))
    th.start()
    th.join()
    assert got == [False]
