"""The stall watch (process/stalls.py) on its own: thresholds, evidence files, the stall span under the call's
span, the gauge and counter, repeats and bounds, and the frame/classification reading of real stacks."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from verl_otel import semconv as sc
from verl_otel.config import StallSettings, load
from verl_otel.export.stall_evidence import EvidenceFiles
from verl_otel.process import stall_frames
from verl_otel.process.metrics import MetricStore
from verl_otel.process.stalls import MAX_DUMPS, StallWatch
from verl_otel.progress.stall_line import print_stall


def my_stuck_reward(release: threading.Event) -> None:  # the "user code" a stall points at
    release.wait(30)


@pytest.fixture
def watch(tmp_path: Path):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    flushes: list[int] = []
    store = MetricStore()
    settings = StallSettings(seconds=0.2, min_seconds=0.2, factor=3.0, repeat_s=0.1)
    w = StallWatch(
        settings,
        tracer=lambda: tracer,
        store=store,
        flush_soon=lambda: flushes.append(1),
        evidence=EvidenceFiles(tmp_path / "stalls", py_spy=""),
        process_role=lambda: sc.PROCESS_ROLE_REWARD,
        on_stall=print_stall,
    )
    w.stop()  # the test ticks it by hand
    w.exporter, w.tracer, w.flushes, w.store_ = exporter, tracer, flushes, store
    yield w


def test_settings_threshold_and_bad_values():
    s = StallSettings(seconds=1800, min_seconds=120, factor=5)
    assert s.threshold(None) == 1800  # first step: the absolute threshold only
    assert s.threshold(10) == 120  # 5 x 10 s is below the floor
    assert s.threshold(100) == 500
    assert s.threshold(1000) == 1800  # capped
    loaded = load({sc.ENV_STALL_FACTOR: "x", sc.ENV_STALL: "0", sc.ENV_STALL_SECONDS: "60"}, report=False)
    assert loaded.stall.enabled is False and loaded.stall.factor == 5.0 and loaded.stall.seconds == 60.0
    assert any(sc.ENV_STALL_FACTOR in p for p in loaded.problems)


def test_median_of_earlier_steps(watch):
    watch.settings = StallSettings(seconds=100.0, min_seconds=0.2, factor=3.0)
    for step in (1, 2, 3):
        token = watch.enter(sc.PHASE_REWARD, step=step)
        watch._calls[token].start -= 1.0  # each took 1 s
        watch.exit(token)
    assert watch.threshold(sc.PHASE_REWARD, 1) == 100.0  # nothing earlier than step 1: absolute
    assert watch.threshold(sc.PHASE_REWARD, 4) == pytest.approx(3.0, rel=0.05)  # 3 x median 1 s


def test_a_stall_leaves_file_span_metrics_and_a_line(watch, tmp_path, capsys):
    release = threading.Event()
    parent = watch.tracer.start_span(sc.PHASE_REWARD)
    entered: dict[str, int | None] = {}

    def call() -> None:
        entered["token"] = watch.enter(sc.PHASE_REWARD, step=3, parent=parent)
        my_stuck_reward(release)
        watch.exit(entered["token"])

    th = threading.Thread(target=call)
    th.start()
    try:
        deadline = time.monotonic() + 5
        while not watch.stalls() and time.monotonic() < deadline:
            watch.check()
            time.sleep(0.05)
        [stall] = watch.stalls()
        assert stall.frame.startswith("my_stuck_reward (test_stalls.py:")
        assert stall.kind == sc.STALL_REWARD
        path = Path(stall.evidence)
        assert (
            path.parent == tmp_path / "stalls"
            and path.name == f"step3-reward-{sc.PROCESS_ROLE_REWARD}-{stall.host}-{stall.pid}.txt"
        )
        text = path.read_text()
        assert text.startswith(sc.STALL_FILE_MAGIC) and "phase: reward" in text and "in my_stuck_reward" in text
        first_thread = text.split("\n\n", 2)[1]  # the stuck thread's stack comes first, right after the header
        assert "in my_stuck_reward" in first_thread, first_thread
        assert "py-spy is not installed" in text  # degraded with one line
        [span] = [s for s in watch.exporter.get_finished_spans() if s.name == sc.SPAN_STALL]
        assert span.parent.span_id == parent.get_span_context().span_id  # under the stalled phase, ended at once
        assert span.attributes[sc.ATTR_STALL_FRAME] == stall.frame
        assert span.attributes[sc.ATTR_STALL_EVIDENCE] == str(path)
        assert span.attributes[sc.ATTR_STALL_PROCESS_ROLE] == sc.PROCESS_ROLE_REWARD and watch.flushes
        readings = {(m.name, labels): v for m, labels, v in watch.store_.readings()}
        assert readings[("verl_stall_active", ("reward",))] == 1.0
        assert readings[("verl_stalls_total", ("reward",))] == 1.0
        assert watch.stalls_in(3) == 1
        out = capsys.readouterr().out
        assert "[verl-otel] STALL: reward of step 3" in out and "my_stuck_reward" in out and str(path) in out
        # the repeats: bounded, appended to the same file
        for _ in range(MAX_DUMPS + 3):
            time.sleep(0.11)
            watch.check()
        assert stall.dumps == MAX_DUMPS
        assert path.read_text().count(sc.STALL_REPEAT_MARK) == MAX_DUMPS - 1
        assert len(watch.stalls()) == 1  # one stall per phase and step, however many ticks
    finally:
        release.set()
        th.join()
    readings = {(m.name, labels): v for m, labels, v in watch.store_.readings()}
    assert readings[("verl_stall_active", ("reward",))] == 0.0


def test_calls_under_the_threshold_are_not_stalls(watch):
    token = watch.enter(sc.PHASE_OLD_LOG_PROB, step=1)
    assert watch.check() == []
    watch.exit(token)
    assert watch.check() == [] and watch.stalls() == []


def test_a_tick_looks_only_at_the_calls_past_the_lowest_threshold(watch):
    """With a batch's samples in flight, a tick walks the old calls (the first in the dict) and stops at the first
    young one: its cost does not grow with the samples in flight; the old call still stalls."""
    old = watch.enter(sc.CALL_AGENT_SAMPLE)
    young = [watch.enter(sc.CALL_AGENT_SAMPLE) for _ in range(10_000)]
    now = watch._calls[young[0]].start + 0.19  # the young ones 0.19 s in, under the 0.2 s floor
    watch._calls[old].start = now - 0.5
    assert [token for token, _ in watch._past_floor(now)] == [old]
    assert [s.call for s in watch.check(now)] == [sc.CALL_AGENT_SAMPLE] and len(watch.stalls()) == 1


def test_file_size_is_capped_and_symlinks_are_refused(tmp_path):
    ev = EvidenceFiles(tmp_path / "s", max_bytes=100, py_spy="")
    path = ev.write("a", "x" * 1000)
    assert path is not None and path.stat().st_size <= 100
    assert ev.append(path, "more") is False  # full
    (tmp_path / "s" / "b.txt").symlink_to(tmp_path / "target")
    assert ev.write("b", "y") is None and not (tmp_path / "target").exists()


def test_innermost_skips_stdlib_and_picks_the_working_thread():
    stacks = [
        stall_frames.ThreadStack(1, "MainThread", (("/usr/lib/python3.11/asyncio/base_events.py", 1, "run_forever"),)),
        stall_frames.ThreadStack(
            2,
            "ThreadPoolExecutor-0_0",
            (
                ("/usr/lib/python3.11/threading.py", 1, "run"),
                ("/x/site-packages/verl/experimental/reward_loop/reward_manager/naive.py", 77, "<lambda>"),
                ("/home/me/my_reward.py", 12, "compute_score"),
                ("/usr/lib/python3.11/socket.py", 5, "recv"),
            ),
        ),
    ]
    frame, stack = stall_frames.innermost(stacks, prefer=1)
    assert stall_frames.frame_text(frame) == "compute_score (my_reward.py:12)" and stack.ident == 2
    # another thread idle in its own event loop (verl's TransferQueue bridge), deeper: not where the call is
    loop = "/usr/lib/python3.11/asyncio/base_events.py"
    idle = (
        ("/usr/lib/python3.11/threading.py", 1, "run"),
        ("/x/site-packages/verl/utils/transferqueue_utils.py", 80, "_run_event_loop_forever"),
        *((loop, 2, "run_forever"), (loop, 3, "_run_once"), ("/usr/lib/python3.11/selectors.py", 4, "select")) * 3,
    )
    frame, stack = stall_frames.innermost([*stacks, stall_frames.ThreadStack(3, "bridge", idle)], prefer=1)
    assert stall_frames.frame_text(frame) == "compute_score (my_reward.py:12)" and stack.ident == 2
    busy = (*idle, ("/usr/lib/python3.11/asyncio/events.py", 5, "_run"), ("/x/site-packages/verl/a.py", 6, "convert"))
    frame, stack = stall_frames.innermost([*stacks, stall_frames.ThreadStack(3, "bridge", busy)], prefer=1)
    assert stall_frames.frame_text(frame) == "convert (a.py:6)" and stack.ident == 3  # running a callback: working
    assert stall_frames.classify(sc.CALL_REWARD, stack.frames) == sc.STALL_REWARD
    collective = (("/x/site-packages/torch/distributed/distributed_c10d.py", 9, "all_reduce"),)
    assert stall_frames.classify(sc.PHASE_UPDATE_ACTOR, collective) == sc.STALL_COLLECTIVE
    assert stall_frames.classify(sc.PHASE_SAVE_CHECKPOINT, ()) == sc.STALL_CHECKPOINT
    assert stall_frames.classify(sc.PHASE_ADV, ()) == sc.STALL_UNKNOWN


def test_an_awaiting_call_points_at_its_await_chain(watch, monkeypatch):
    """An agent-loop sample waiting on the engine is on no thread's stack: its task's await chain is."""
    import asyncio

    calls: list = []  # (loop, gate) of the sample in flight

    async def wait_for_engine(gate: asyncio.Event) -> None:
        await gate.wait()

    async def sample() -> None:
        gate = asyncio.Event()
        token = watch.enter(sc.CALL_AGENT_SAMPLE)
        calls.append((asyncio.get_running_loop(), gate))
        await wait_for_engine(gate)
        watch.exit(token)

    async def main() -> None:
        await asyncio.create_task(sample())

    [stall] = _check_while_idle(watch, monkeypatch, main, calls)
    assert stall.frame.startswith("wait_for_engine (test_stalls.py:") and stall.kind == sc.STALL_ROLLOUT
    assert "Awaiting" in Path(stall.evidence).read_text()


def _check_while_idle(watch: StallWatch, monkeypatch, main, calls: list) -> list:
    """``main()`` on an event loop of its own thread (an actor's: no user frame below it), checked once the call
    waits and the loop idles; the test's own thread is not part of the watched process. ``calls``: (loop, gate)."""
    import asyncio

    actor = threading.Thread(target=asyncio.run, args=(main(),), name="actor-loop")
    actor.start()
    real_capture = stall_frames.capture
    monkeypatch.setattr(stall_frames, "capture", lambda: [s for s in real_capture() if s.name != "MainThread"])
    try:
        time.sleep(0.4)
        return watch.check()
    finally:
        loop, gate = calls[0]
        loop.call_soon_threadsafe(gate.set)
        actor.join(10)


def test_a_call_behind_a_frameless_coroutine_points_at_the_coroutine_it_awaits(watch, monkeypatch):
    """Ray runs an async actor's method in a compiled coroutine that shows no frame and no await chain: a weight
    sync's stall reads the chain of the verl coroutine its hook awaits (hooks/weight_sync.py), down through the
    ``async for`` over the checkpoint engine's stream (an asend object, which names its generator only to the GC)."""
    import asyncio

    class Compiled:  # Ray's compiled coroutine: awaits what it holds, shows no frame
        def __init__(self, coro) -> None:
            self.coro = coro

        def __await__(self):
            return self.coro.__await__()

    async def broadcast(gate: asyncio.Event) -> None:
        await gate.wait()

    async def receive_weights(gate: asyncio.Event):
        await broadcast(gate)
        yield "w"

    async def update_weights(gate: asyncio.Event) -> None:  # verl's CheckpointEngineWorker.update_weights
        async for _ in receive_weights(gate):
            pass

    calls: list = []  # (loop, gate) of the call in flight

    async def hooked() -> None:  # hooks/weight_sync.py's _synced, in the task Ray's coroutine runs
        gate = asyncio.Event()
        coro = update_weights(gate)
        held = watch.enter(sc.PHASE_UPDATE_WEIGHTS, call=sc.CALL_WEIGHT_RECEIVE, step=1, awaits=coro)
        blind = watch.enter(sc.PHASE_UPDATE_WEIGHTS, call=sc.CALL_WEIGHT_SEND, step=2)  # the running task's chain
        calls.append((asyncio.get_running_loop(), gate))
        await coro
        watch.exit(held)
        watch.exit(blind)

    async def main() -> None:
        await asyncio.ensure_future(Compiled(hooked()))

    stalls = {s.call: s for s in _check_while_idle(watch, monkeypatch, main, calls)}
    received = stalls[sc.CALL_WEIGHT_RECEIVE]
    assert received.frame.startswith("broadcast (test_stalls.py:"), received
    assert received.waiting_on == sc.STALL_WAIT_AWAIT and received.kind == sc.STALL_COLLECTIVE
    assert "receive_weights (test_stalls.py:" in Path(received.evidence).read_text()
    assert not stalls[sc.CALL_WEIGHT_SEND].frame.startswith("broadcast")  # what the frameless chain hid


def test_native_stacks_by_py_spy_or_one_line(tmp_path):
    """With py-spy installed and allowed to attach, the native stacks; otherwise one line says why not."""
    import os

    text = EvidenceFiles(tmp_path).native(os.getpid())
    if text.startswith("(native stacks:"):
        assert text.count("\n") == 1
    else:
        assert "Thread" in text and "test_native_stacks_by_py_spy_or_one_line" in text
    assert "not installed" in EvidenceFiles(tmp_path, py_spy="").native(os.getpid())
    assert "cannot run py-spy" in EvidenceFiles(tmp_path, py_spy=str(tmp_path / "nope")).native(os.getpid())


def test_off_by_setting(monkeypatch, tmp_path):
    from verl_otel import runtime

    monkeypatch.setenv(sc.ENV_STALL, "0")
    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    runtime.reset_for_tests()
    try:
        assert runtime.current().stalls is None
    finally:
        runtime.reset_for_tests()


def test_a_forked_child_gets_its_own_watch(monkeypatch, tmp_path):
    import os

    from verl_otel import runtime

    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    monkeypatch.setenv(sc.ENV_STALL_SECONDS, "0.1")
    runtime.reset_for_tests()
    try:
        parent = runtime.current().stalls
        assert parent is not None
        parent.exit(parent.enter(sc.PHASE_ADV))  # its thread runs
        pid = os.fork()
        if pid == 0:  # the child: a new runtime, a new watch with its own thread, nothing of the parent's calls
            code = 1
            try:
                child = runtime.current().stalls
                token = child.enter(sc.PHASE_ADV, step=1)
                deadline = time.monotonic() + 10  # its own thread catches it (polled: a loaded machine is slow)
                while not child.stalls() and time.monotonic() < deadline:
                    time.sleep(0.05)
                ok = child is not parent and [s.pid for s in child.stalls()] == [os.getpid()]
                child.exit(token)
                code = 0 if ok else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert parent.stalls() == []
    finally:
        runtime.reset_for_tests()


def test_enter_and_exit_do_no_io_on_the_calling_thread(watch, monkeypatch):
    """The training thread's side is a dict entry: opening, writing or spawning there fails this test."""
    import builtins
    import os
    import subprocess

    me = threading.get_ident()

    def guard(real):
        def call(*a, **k):
            assert threading.get_ident() != me, f"{real.__name__} on the calling thread"
            return real(*a, **k)

        return call

    for mod, name in ((builtins, "open"), (os, "open"), (os, "write"), (subprocess, "run"), (builtins, "print")):
        monkeypatch.setattr(mod, name, guard(getattr(mod, name)))
    for step in range(3):
        watch.exit(watch.enter(sc.PHASE_UPDATE_ACTOR, step=step))
    token = watch.enter(sc.PHASE_UPDATE_ACTOR, step=9)
    th = threading.Thread(target=watch.check, kwargs={"now": time.monotonic() + 1000})
    th.start()  # the stall itself is handled off the calling thread (here: another thread, as the watchdog's)
    th.join()
    watch.exit(token)
    assert len(watch.stalls()) == 1 and watch.stalls()[0].evidence


def test_hang_phases_parse_and_weight_syncs_classify_as_collective():
    from verl_otel.demo.slow import RequestDelays, SlowSpec

    spec = SlowSpec.parse_hang(["rollout@1=5,update_weights@2=7"])
    assert spec.seconds("rollout", 1) == 5 and spec.seconds("update_weights", 2) == 7
    delays = RequestDelays(SlowSpec(), spec)
    assert (delays.hang_s(1), delays.hang_s(1), delays.hang_s(2)) == (5, 0, 0)  # the step's first request only
    engine = ("/x/verl_otel/demo/cpu_checkpoint_engine.py", 40, "_wait_for_transfer")
    assert stall_frames.classify(sc.CALL_WEIGHT_SEND, [engine]) == sc.STALL_COLLECTIVE
    manager = ("/v/site-packages/verl/checkpoint_engine/base.py", 519, "update_weights")
    assert stall_frames.classify(sc.PHASE_UPDATE_WEIGHTS, [manager]) == sc.STALL_COLLECTIVE
    server = [("/x/verl_otel/demo/standins.py", 90, "_generate"), ("/x/verl_otel/demo/slow.py", 97, "planted_hang")]
    assert stall_frames.classify(sc.CALL_SERVER_REQUEST, server) == sc.STALL_ROLLOUT
