"""The runtime owns the trackers (verl_otel/trackers.py): one per runtime, built with that runtime's parts, wired by its
process role's row once, and gone with a test's reset (its threads stopped, its exit hook taken back)."""

from __future__ import annotations

import ast
import atexit
import io
from pathlib import Path

from verl_otel import runtime, trackers
from verl_otel import semconv as sc

ROOT = Path(__file__).resolve().parent.parent / "verl_otel"


def test_one_model_per_runtime_and_a_new_one_after_reset(monkeypatch):
    runtime.reset_for_tests()
    try:
        first = trackers.current()
        assert trackers.current() is first and first.runtime is runtime.current()
        assert first.steps is first.steps and first.steps._svc.store is runtime.current().store
        runtime.reset_for_tests()
        second = trackers.current()
        assert second is not first and second.steps is not first.steps
    finally:
        runtime.reset_for_tests()


def test_a_role_row_wires_once(monkeypatch, tmp_path):
    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    monkeypatch.setenv("VERL_OTEL_CONSOLE", "1")
    monkeypatch.setenv("VERL_PROGRESS_LOG", "1")
    runtime.reset_for_tests()
    reported: list[str] = []
    monkeypatch.setattr(runtime, "_on_process_role", [reported.append])  # the start-up line's listener, this test's
    try:
        m = trackers.current()
        for _ in range(2):
            m.wire(sc.PROCESS_ROLE_TRAINER)
        kinds = [type(o).__name__ for o in m.steps.observers]
        assert kinds == ["TrainerMetrics", "RewardEmit", "StepConsole", "ProgressConsole"]
        assert reported == [sc.PROCESS_ROLE_TRAINER]
        m.wire(sc.PROCESS_ROLE_TRAINER, key=trackers.FULLY_ASYNC_TRAINER)
        assert m.step_notes == [m.trainer_side.console_note] and reported == [sc.PROCESS_ROLE_TRAINER]
        assert set(trackers.PROCESS_ROLES) >= {
            sc.PROCESS_ROLE_TRAINER,
            sc.PROCESS_ROLE_WORKER,
            sc.PROCESS_ROLE_AGENT_LOOP,
            sc.PROCESS_ROLE_REWARD,
        }
    finally:
        runtime.reset_for_tests()


def test_reset_stops_the_models_threads_and_exit_hooks(monkeypatch, tmp_path):
    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    monkeypatch.setenv("VERL_PROGRESS_LOG", "1")
    monkeypatch.setenv("VERL_PROGRESS_HEARTBEAT_SEC", "0.1")
    runtime.reset_for_tests()
    calls: list[str] = []
    unregistered: list[object] = []
    monkeypatch.setattr(atexit, "unregister", unregistered.append)
    m = trackers.current()
    m.wire(sc.PROCESS_ROLE_TRAINER)
    console = m.progress.console
    assert console is not None
    console._stream = io.StringIO()
    console.on_phase_start(sc.PHASE_ROLLOUT, 1)
    m.at_exit(lambda: calls.append("flushed"))
    thread = console._thread
    assert thread is not None and thread.is_alive()
    runtime.reset_for_tests()
    thread.join(timeout=2.0)
    assert not thread.is_alive(), "the heartbeat ends with its trackers"
    assert unregistered == [m._exit]
    m._exit()
    assert calls == [], "closed trackers' exit hooks never run"


def test_hooks_print_nothing_and_reach_the_runtime_through_the_trackers():
    """[VERL_PROGRESS] and the step lines are the progress package's; the hooks and the trackers reach the
    runtime through trackers.current() (the demo's stand-in server only declares its role)."""
    printing, calls = [], []
    for path in sorted(ROOT.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            is_print = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
            if is_print and rel.startswith("hooks/"):
                printing.append(rel)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "current"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "runtime"
                and rel != "runtime.py"
            ):
                calls.append(rel)
    assert printing == []
    assert sorted(calls) == ["demo/standins.py", "trackers.py"]
