"""`verl-otel top` on the real verl CPU demo (the shared v1 run, 3 steps, 2 agent-loop workers, 4 prompts x
n=2, a 3 s slower actor update in step 3): `top --once` frames taken while it ran, against what the run did
(Prometheus scraping the same pages, the trace file), and the live view in a tmux terminal."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.verl

TRAIN_SAMPLES = 8  # data.train_batch_size=4 x rollout.n=2, split over 2 agent-loop workers


def _frames(v1_run) -> list[str]:
    probe = v1_run.extra["top"]
    assert probe.frames, "top --once never ran during the demo"
    assert all(rc == 0 for rc, _ in probe.frames), [out for rc, out in probe.frames if rc]
    return [out for _, out in probe.frames]


def _rows(frame: str, first: str) -> list[list[str]]:
    return [ln.split() for ln in frame.splitlines() if ln.split()[:1] == [first]]


def _live(frame: str) -> bool:
    """A frame of the running job: every process answered (the run's processes remove their entries from
    the targets file at exit, so frames after the end list none)."""
    first = frame.splitlines()[0]
    return "unreachable" not in first and "(0 targets" not in first


def test_once_while_it_runs(v1_run):
    assert v1_run.rc == 0, v1_run.log_tail()
    frames = _frames(v1_run)
    live = [f for f in frames if _live(f)]
    assert len(live) >= 3, frames[-1]
    # each frame names the run and reads every process of the file
    assert all("verl-otel-demo/cpu-v1-grpo" in f.splitlines()[0] for f in live)
    # a phase seen running, with its elapsed time, in some step of the run
    running = [m for f in live for m in re.findall(r"^running: ([a-z_]+) (\d+\.\d)s", f, re.M)]
    assert running and {p for p, _ in running} <= {
        "rollout",
        "validate",
        "old_log_prob",
        "ref",
        "adv",
        "update_actor",
        "update_weights",
        "save_checkpoint",
    }, running
    steps = {int(m) for f in live for m in re.findall(r"^step (\d+)/3 ", f, re.M)}
    assert steps and steps <= {0, 1, 2, 3}
    # rollout bars: one per agent-loop worker and their total, which is the step's batch
    with_train = [f for f in live if _rows(f, "total")]
    assert with_train, live[-1]
    totals = [r for f in with_train for r in _rows(f, "total") if r[1] == "train"]
    assert totals and all(r[3].endswith(f"/{TRAIN_SAMPLES}") for r in totals), totals
    workers = {r[0] for f in with_train for r in _rows(f, "0") + _rows(f, "1") if r[1] == "train"}
    assert workers == {"0", "1"}
    # the actor update: 2 optimizer mini-batches per update (ppo_mini_batch_size=2 of 4 prompts)
    actor = [r for f in live for r in _rows(f, "actor")]
    assert actor and all(r[2].endswith("/2") for r in actor), actor


def test_last_frame_agrees_with_the_run(v1_run):
    live = [f for f in _frames(v1_run) if _live(f)]
    last = live[-1]
    assert "step 3/3 [########################] 100%" in last and "running: no phase" in last
    prom_step = v1_run.prom.scalar_by("max(verl_training_step)")[()]
    assert prom_step == 3.0
    # the last logged step's phases, with the planted slow actor update (3 s) in it
    table = last.split("last steps (seconds per phase)")[1].splitlines()
    header = table[1].split()
    row = table[2].split()
    assert row[0] == "3"
    update = float(row[header.index("update_actor") - 1])  # "step (verl)" is two header words
    assert update >= 3.0
    # the demo is healthy: nothing trips but the step time (step 3 holds the stall matrix's slow calls too,
    # tests/test_e2e_stall_matrix.py: about 11 s planted, so it may be past 1.5x the typical step)
    health = last.split("health (")[1]
    tripped = re.findall(r"^\s*TRIPPED\s+(\S.*?)\s{2,}", health, re.M)
    assert set(tripped) <= {"steps getting slower"} and re.search(r"^ ok\s+KL blow-up", health, re.M), health


def test_live_view_in_tmux(v1_run):
    probe = v1_run.extra["top"]
    if probe.session is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    screens = [s for s in probe.screens if "verl-otel top" in s]
    assert len(screens) >= 2
    assert all(s.count("verl-otel top") == 1 for s in screens)  # redrawn in place, not scrolled
    assert len(set(screens)) > 1  # it did refresh
    assert any(re.search(r"step [1-3]/3", s) for s in screens)
    assert v1_run.extra["top_live_rc"] == 0 and "Traceback" not in probe.after_stop
