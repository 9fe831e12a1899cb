"""A real run ended by a signal mid-step keeps the step it was in, ended and marked, and ``doctor`` says so
(issue 39). Four short demo runs, each started as a terminal starts a job (its own process group) and signalled in
step 2 (the ``Case`` table): on v1 while its actor update runs (made 30 s long), Ctrl-C (SIGINT to the group) and a
scheduler's time limit (SIGTERM to the job's driver, SIGKILL to the group after a grace period); the time limit on
fully_async (its trainer an async Ray actor: fit() off the main thread); Ctrl-C on verl's vLLM rollout while its
engine is stuck. Ray ends the trainer (an actor, in a process group of its own) with SIGTERM and SIGKILL
milliseconds apart once its driver goes, too few on a loaded machine: the driver's note (``ends/``) is read by the
trainer, which writes its open step before the driver goes on to end. (Where the SIGTERM also reaches the Ray
daemons the driver started, in its group, the raylet ends the trainer at once and the trainer's own end watch races
those milliseconds: ``tests/test_run_end.py`` tests that path.) 1-2 minutes each on 2 cores."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.procs import clean_env
from helpers.real_stack import scrape
from helpers.traces import load_spans
from helpers.verl_runs import vllm_demo_cmd

from verl_otel import semconv as sc
from verl_otel.cli.main import main

pytestmark = pytest.mark.verl

STEPS, SLOW_STEP = 3, 2
GRACE_S = 10.0  # a scheduler's grace period between SIGTERM and SIGKILL


@dataclass(frozen=True)
class Case:
    """One abrupt end: the demo's trainer (and rollout), what makes step SLOW_STEP's ``phase`` last, the process
    whose title shows that phase running (Ray retitles its workers ``ray::Class.method``), and the phases the
    interrupted step has run by then."""

    trainer: str
    plant: tuple[str, str]  # the demo's --slow or --hang and its PHASE@STEP=SECONDS
    phase: str
    running: re.Pattern[str]
    before: frozenset[str]
    rollout: str = "standin"
    settle_s: float = 2.0  # from seeing it run to the signal
    kept: frozenset[int] = frozenset({0, 1})  # the whole steps before it (0: the validation before training)


_UPDATING = re.compile(r"ray::\S+\.\S*update_actor")
V1 = Case(
    "v1",
    ("--slow", f"update_actor@{SLOW_STEP}=30"),
    sc.PHASE_UPDATE_ACTOR,
    _UPDATING,
    frozenset({sc.PHASE_ROLLOUT, sc.PHASE_OLD_LOG_PROB}),
)
#: fully_async's trainer trains on what its rollouter sent (its rollout phase is the wait for samples) with the
#: rollout's own log-probs (no old_log_prob)
FULLY_ASYNC = Case(
    "fully_async",
    ("--slow", f"update_actor@{SLOW_STEP}=30"),
    sc.PHASE_UPDATE_ACTOR,
    re.compile(r"ray::WorkerDict"),  # an async actor: Ray does not retitle it per call (the trainer's gauge says)
    frozenset({sc.PHASE_ROLLOUT, sc.PHASE_REF}),
    kept=frozenset({1}),  # its rollouter validates before training, not in a trainer step
)
#: verl's vLLM rollout: vLLM's engine stops for a minute at step SLOW_STEP's first token (demo/vllm_slow.py),
#: requests running, as a stuck engine core: a user's Ctrl-C
VLLM = Case(
    "v1",
    ("--hang", f"rollout@{SLOW_STEP}=60"),
    sc.PHASE_ROLLOUT,
    re.compile(r"ray::vLLMHttpServer"),
    frozenset(),
    rollout="vllm",
    settle_s=8.0,
)


@dataclass
class Ended:
    out: Path
    case: Case
    rc: int
    after_s: float  # from the signal to the demo's exit
    sent_at: float  # the signal's wall-clock time
    signalled: list[str]  # the processes the signal was sent to (a failing test's reader)


def _tree(root: int, depth: int = 1 << 10) -> list[tuple[int, str]]:
    """(pid, args) of ``root``'s descendants down to ``depth`` (Ray's workers included: they keep their parent,
    not its group)."""
    ps = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
    children: dict[int, list[tuple[int, str]]] = {}
    for row in (line.split(None, 2) for line in ps.splitlines()[1:]):
        if len(row) == 3:
            children.setdefault(int(row[1]), []).append((int(row[0]), row[2]))
    found, todo = [], [(root, 0)]
    while todo:
        parent, level = todo.pop()
        if level < depth:
            for pid, args in children.get(parent, []):
                found.append((pid, args))
                todo.append((pid, level + 1))
    return found


def _alive(procs: list[tuple[int, str]]) -> list[int]:
    """Those of ``procs`` still running as themselves (a pid reused since is not ours)."""
    alive = []
    for pid, args in procs:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ray_title = args.startswith("ray::") and cmdline.startswith("ray::")  # Ray retitles its workers
        if cmdline.strip() == args.strip() or ray_title:
            alive.append(pid)
    return alive


def _trainer_runs(out: Path, phase: str) -> bool:
    """The trainer's own /metrics (its target in ``prometheus_targets.json``) says ``phase`` runs now: after step
    1's line, that is step SLOW_STEP's (a process title cannot say it where Ray does not retitle per call, and a
    fixed wait after the title is a guess on a loaded machine: CI's fully_async run was still in its rollout)."""
    try:
        groups = json.loads((out / "prometheus_targets.json").read_text())
    except (OSError, ValueError):
        return False
    active = re.compile(rf'^{sc.PHASE_ACTIVE.name}{{[^}}]*phase="{re.escape(phase)}"[^}}]*}} 1(\.0)?$', re.M)
    trainers = [g for g in groups if g.get("labels", {}).get(sc.LABEL_PROCESS_ROLE) == sc.PROCESS_ROLE_TRAINER]
    return any(active.search(scrape(f"http://{t}/metrics")) for g in trainers for t in g.get("targets", []))


def _signalled_run(out: Path, case: Case, sig: int, grace_s: float | None = None) -> Ended:
    """The demo in its own process group; ``sig`` to the group while step SLOW_STEP's slowed phase runs (after
    step 1's metrics are out); with ``grace_s``, ``sig`` to the job's processes only and SIGKILL to the group that
    much later, as a scheduler does. Ray's processes (in groups of their own) are then given a minute to end as Ray
    ends them; whatever is left is killed."""
    out.mkdir(parents=True, exist_ok=True)
    args = ["--steps", str(STEPS), "--trainer", case.trainer, *case.plant]
    if case.rollout == "vllm":
        cmd = vllm_demo_cmd(out, *args)
    else:
        cmd = [sys.executable, "-m", "verl_otel.demo", *args, "--out", str(out)]
    proc = subprocess.Popen(
        cmd,
        env=clean_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    seen: list[tuple[int, str]] = []
    signalled: list[str] = []
    sent = 0.0
    try:
        deadline = time.monotonic() + 420
        while proc.poll() is None and time.monotonic() < deadline and not sent:
            seen = _tree(proc.pid) or seen
            log = (out / "demo.log").read_text(errors="replace") if (out / "demo.log").exists() else ""
            step_1 = re.search(r"\[verl-otel\] step 1/", log)
            if step_1 and any(case.running.search(a) for _, a in seen) and _trainer_runs(out, case.phase):
                time.sleep(case.settle_s)  # well inside the slowed phase
                seen = _tree(proc.pid) or seen
                if grace_s is None:
                    os.killpg(proc.pid, sig)
                else:  # the job's processes (the demo, verl's driver), not the Ray daemons the driver started
                    drivers = _tree(proc.pid, depth=1)  # the demo runs verl's entry point as its child
                    for pid, args in [(proc.pid, "the demo"), *drivers]:
                        os.kill(pid, sig)
                        signalled.append(f"{pid} {args[:120]}")
                sent = time.monotonic()
            time.sleep(0.3)
        assert sent, f"never saw step {SLOW_STEP}'s {case.phase}: {(out / 'demo.log').read_text()[-3000:]}"
        if grace_s is not None:
            time.sleep(grace_s)
            with contextlib.suppress(ProcessLookupError):  # the group may be gone already
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(120)
        gone = time.monotonic() + 60
        while _alive(seen) and time.monotonic() < gone:
            time.sleep(0.5)
        return Ended(
            out, case, proc.returncode, time.monotonic() - sent, time.time() - (time.monotonic() - sent), signalled
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        for pid in _alive(seen):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> Ended:
    return _signalled_run(tmp_path_factory.mktemp("ctrl-c"), V1, signal.SIGINT)


@pytest.fixture(scope="module")
def terminated(tmp_path_factory) -> Ended:
    return _signalled_run(tmp_path_factory.mktemp("time-limit"), V1, signal.SIGTERM, grace_s=GRACE_S)


@pytest.fixture(scope="module")
def fully_async_terminated(tmp_path_factory) -> Ended:
    return _signalled_run(tmp_path_factory.mktemp("fully-async-time-limit"), FULLY_ASYNC, signal.SIGTERM, GRACE_S)


@pytest.fixture(scope="module")
def vllm_interrupted(tmp_path_factory) -> Ended:
    return _signalled_run(tmp_path_factory.mktemp("vllm-ctrl-c"), VLLM, signal.SIGINT)


def _check_kept(run: Ended, reason: str, capsys) -> dict:
    """Step SLOW_STEP is in the trace, ERROR, marked with ``reason``, with its phases so far; the steps before it
    are whole and clean; doctor names it first."""
    case = run.case
    assert run.rc != 0 and run.after_s < 90, (run.rc, run.after_s)  # every process gone, Ray's too
    spans = load_spans(run.out / sc.TRACES_FILE)
    steps = {s.attributes[sc.ATTR_GLOBAL_STEP]: s for s in spans if s.name == sc.SPAN_STEP}
    ends = {k: round(s.end_ns / 1e9 - run.sent_at, 1) for k, s in steps.items()}  # after the signal
    assert set(steps) == {*case.kept, SLOW_STEP}, (ends, run.signalled)
    assert not any(steps[k].status_error for k in case.kept)
    step = steps[SLOW_STEP]
    assert step.status_error and step.attributes[sc.ATTR_RUN_END_REASON] == reason, step.attributes
    assert step.attributes[sc.ATTR_RUN_END_PHASE] == case.phase
    phases = {s.name: s for s in spans if s.trace_id == step.trace_id and s.parent_id == step.span_id}
    assert {*case.before, case.phase} <= set(phases), sorted(phases)
    slowed = phases[case.phase]
    assert slowed.status_error and slowed.attributes[sc.ATTR_RUN_END_REASON] == reason
    assert not any(phases[p].status_error for p in case.before)  # what finished before stays as it was
    assert main(["doctor", "--dir", str(run.out), "--json"]) == 0
    end = json.loads(capsys.readouterr().out)["run_end"]
    assert (end["reason"], end["step"], end["phase"]) == (reason, SLOW_STEP, case.phase), end
    assert main(["doctor", "--dir", str(run.out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"run end:   {reason}") and f"in step {SLOW_STEP}, phase {case.phase}" in text, text
    return end


def test_ctrl_c_keeps_the_interrupted_step(interrupted, capsys):
    end = _check_kept(interrupted, sc.END_INTERRUPTED, capsys)
    assert end["process_role"] == sc.PROCESS_ROLE_DRIVER and any(n["signal"] == "SIGINT" for n in end["notes"]), end
    assert "trainer pid" in end["trainer"]


def test_a_time_limit_keeps_the_terminated_step(terminated, capsys):
    end = _check_kept(terminated, sc.END_TERMINATED, capsys)
    assert end["detail"].startswith("SIGTERM to the driver") and end["process_role"] == sc.PROCESS_ROLE_DRIVER, end


def test_a_time_limit_keeps_fully_async_s_open_step(fully_async_terminated, capsys):
    end = _check_kept(fully_async_terminated, sc.END_TERMINATED, capsys)
    assert end["detail"].startswith("SIGTERM to the driver") and end["process_role"] == sc.PROCESS_ROLE_DRIVER, end


def test_ctrl_c_in_a_vllm_rollout_keeps_the_step(vllm_interrupted, capsys):
    """Interrupted while vLLM decodes step 2's long tail: the rollout phase is kept, ended and marked, and the
    samples that finished before it are in the trace under it."""
    end = _check_kept(vllm_interrupted, sc.END_INTERRUPTED, capsys)
    assert end["process_role"] == sc.PROCESS_ROLE_DRIVER and any(n["signal"] == "SIGINT" for n in end["notes"]), end
