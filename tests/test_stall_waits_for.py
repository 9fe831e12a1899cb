"""Whom a stalled call waits on: the calls its thread sent to other processes meanwhile (verl's worker-group
methods, told by hooks/worker_group.py) go into its stall record, evidence file, span, console line and doctor's
answer ("waiting on 1 train_worker call compute_log_prob, rank 0"). The real runs: test_e2e_stall_matrix.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from helpers.memory_spans import memory_provider

from verl_otel import semconv as sc
from verl_otel.analysis import incidents
from verl_otel.analysis.stall_records import StallRecord, advice, parse_file
from verl_otel.config import StallSettings
from verl_otel.export.stall_evidence import EvidenceFiles
from verl_otel.process.metrics import MetricStore
from verl_otel.process.stall_record import sent_text
from verl_otel.process.stalls import MAX_SENT, StallWatch
from verl_otel.progress.stall_line import stall_line

WAITS = "1 train_worker call compute_log_prob, rank 0"


@pytest.fixture
def watch(tmp_path: Path):
    provider, exporter = memory_provider()
    tracer = provider.get_tracer("t")
    w = StallWatch(
        StallSettings(seconds=0.2, min_seconds=0.2, factor=3.0, repeat_s=100.0),
        tracer=lambda: tracer,
        store=MetricStore(),
        flush_soon=lambda: None,
        evidence=EvidenceFiles(tmp_path / "stalls", py_spy=""),
        process_role=lambda: sc.PROCESS_ROLE_TRAINER,
    )
    w.stop()  # ticked by hand
    w.exporter, w.tracer = exporter, tracer
    yield w


def test_sent_text_names_count_role_call_and_ranks():
    assert sent_text(sc.PROCESS_ROLE_WORKER, "compute_log_prob", 1) == WAITS
    assert sent_text(sc.PROCESS_ROLE_WORKER, "update_actor", 2) == "2 train_worker calls update_actor, ranks 0-1"
    assert sent_text(sc.PROCESS_ROLE_WORKER, "infer_batch", None) == "train_worker call infer_batch"


def _stall_while(watch: StallWatch, send) -> object:
    """A trainer phase on another thread that sends what ``send(watch)`` sends and waits; the stall it makes."""
    release, ready = threading.Event(), threading.Event()
    parent = watch.tracer.start_span(sc.PHASE_OLD_LOG_PROB)

    def phase() -> None:
        token = watch.enter(sc.PHASE_OLD_LOG_PROB, step=3, parent=parent)
        send(watch)
        ready.set()
        release.wait(10)
        watch.exit(token)

    th = threading.Thread(target=phase)
    th.start()
    ready.wait(5)
    watch._calls[max(watch._calls)].start -= 1.0  # in flight for a second: past the 0.2 s threshold
    try:
        (stall,) = watch.check()
        return stall
    finally:
        release.set()
        th.join()


def test_a_stalled_phase_says_the_calls_it_waits_on(watch, tmp_path):
    watch.send("1 train_worker call update_actor, rank 0", blocking=True)  # before the phase: not its wait
    stall = _stall_while(watch, lambda w: w.send(WAITS, blocking=True))
    assert stall.waits_for == WAITS
    rec = parse_file(Path(stall.evidence))
    assert rec is not None and rec.waits_for == WAITS  # the file says it, so doctor does
    (span,) = [s for s in watch.exporter.get_finished_spans() if s.name == sc.SPAN_STALL]
    assert span.attributes[sc.ATTR_STALL_WAITS_FOR] == WAITS
    assert f", waiting on {WAITS} [" in stall_line(stall)


def test_an_answered_blocking_call_is_no_longer_waited_on_a_pending_one_is(watch):
    def send(w: StallWatch) -> None:
        w.answered(w.send("1 train_worker call compute_ref_log_prob, rank 0", blocking=True))
        w.answered(w.send("1 train_worker call infer_batch, rank 0", blocking=False))  # its futures come later

    assert _stall_while(watch, send).waits_for == "1 train_worker call infer_batch, rank 0"


def test_the_calls_remembered_are_bounded(watch):
    for i in range(MAX_SENT * 3):
        watch.send(f"call {i}", blocking=False)
    assert len(watch._sent) == MAX_SENT and f"call {MAX_SENT * 3 - 1}" in [s.what for s in watch._sent.values()]


def test_a_waiter_whose_worker_was_not_caught_says_whom_it_waits_on():
    trainer = StallRecord(
        sc.PHASE_OLD_LOG_PROB,
        sc.PHASE_OLD_LOG_PROB,
        3,
        9.0,
        5.0,
        "fit (trainer_base.py:1)",
        process_role=sc.PROCESS_ROLE_TRAINER,
    )
    trainer.waiting_on, trainer.waits_for, trainer.pid, trainer.detected_at = sc.STALL_WAIT_RAY, WAITS, 1, 100.0
    assert WAITS in advice(trainer)
    (inc,) = incidents.group([trainer])
    assert not inc.root_caught and WAITS in inc.root.advice
    worker = StallRecord(sc.PHASE_OLD_LOG_PROB, "worker.compute_log_prob", 3, 8.0, 5.0, "run (cpu_plugin.py:1)")
    worker.process_role, worker.pid, worker.waiting_on, worker.detected_at = sc.PROCESS_ROLE_WORKER, 2, "", 100.0
    (inc,) = incidents.group([trainer, worker])
    assert inc.root is worker and inc.waiting == [trainer]
    assert inc.as_dict()["waiting"][0]["waits_for"] == WAITS and WAITS in trainer.advice


def test_the_trainer_side_of_a_worker_group_call_tells_the_watch(monkeypatch, tmp_path):
    """verl's own func_generator (the worker group's callable per method), hooked: the call is told while it is
    out, and a non-blocking one (its futures are waited on later) stays told after it returns. (A blocking one
    ends in ray.get: test_an_answered_blocking_call_is_no_longer_waited_on_a_pending_one_is, and the real runs.)"""
    from verl.single_controller.ray.base import func_generator as verl_func_generator

    from verl_otel import runtime
    from verl_otel.hooks.worker_group import func_generator

    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    runtime.reset_for_tests()
    try:
        watch = runtime.current().stalls
        assert watch is not None
        group = type("Group", (), {"world_size": 2})()
        seen: list[list[str]] = []

        def execute(method: str, *args: object, **kwargs: object) -> list[str]:
            seen.append([s.what for s in watch._sent.values()])  # while the call is out
            return ["future"]

        def make(method: str, blocking: bool):
            args = (group, method, lambda g, *a, **k: (a, k), lambda g, out: out, execute, blocking)
            return func_generator(verl_func_generator, None, args, {})

        assert make("actor_rollout_compute_log_prob", False)() == ["future"]
        assert seen[-1] == ["2 train_worker calls compute_log_prob, ranks 0-1"]
        make("init_model", False)()  # not a call a phase waits on: nothing told
        assert [s.what for s in watch._sent.values()] == ["2 train_worker calls compute_log_prob, ranks 0-1"]
    finally:
        runtime.reset_for_tests()


def test_the_trainer_waits_on_the_agent_loop_workers_while_they_generate(monkeypatch, tmp_path):
    """verl's ``AgentLoopManager.generate_sequences`` (its ``auto_await`` put back on top by the hook): while the
    workers generate, a trainer phase that stalls (a slow validation, a slow rollout) waits on them; then not."""
    from verl.utils.ray_utils import auto_await

    from verl_otel import runtime
    from verl_otel.hooks.rollout import patch_legacy_manager

    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    runtime.reset_for_tests()
    try:
        watch = runtime.current().stalls
        assert watch is not None
        seen: list[list[str]] = []

        async def generate_sequences(self: object, prompts: object) -> str:
            seen.append([s.what for s in watch._sent.values()])  # while the workers generate
            return "out"

        manager = type("Manager", (), {"agent_loop_workers": ["w0", "w1"]})()
        assert patch_legacy_manager(auto_await(generate_sequences))(manager, object()) == "out"
        assert seen == [["2 agent_loop_worker calls generate_sequences, ranks 0-1"]]
        assert not watch._sent  # answered: a later stall does not wait on it
    finally:
        runtime.reset_for_tests()


def test_one_process_slow_in_one_call_after_another_is_one_incident_each():
    """A worker slow in compute_log_prob, then in compute_ref_log_prob (the same step, a second apart): two incidents,
    each with the trainer phase that waited on it."""
    recs = []
    for call, phase, start in (
        ("worker.compute_log_prob", sc.PHASE_OLD_LOG_PROB, 100.0),
        ("worker.compute_ref_log_prob", sc.PHASE_REF, 103.5),
    ):
        w = StallRecord(
            phase, call, 3, 1.6, 1.5, "slowed_forward (cpu_plugin.py:1)", process_role=sc.PROCESS_ROLE_WORKER, pid=2
        )
        w.waiting_on, w.detected_at, w.last_elapsed_s, w.host = "", start + 1.6, 3.0, "vm"
        t = StallRecord(
            phase, phase, 3, 1.8, 1.5, "fit (trainer_base.py:1)", process_role=sc.PROCESS_ROLE_TRAINER, pid=1, host="vm"
        )
        t.waiting_on, t.waits_for, t.detected_at = (
            sc.STALL_WAIT_RAY,
            f"1 train_worker call {call[7:]}, rank 0",
            start + 1.8,
        )
        recs += [w, t]
    found = incidents.group(recs)
    assert [(i.root.call, [w.phase for w in i.waiting], i.peers) for i in found] == [
        ("worker.compute_log_prob", [sc.PHASE_OLD_LOG_PROB], []),
        ("worker.compute_ref_log_prob", [sc.PHASE_REF], []),
    ]
