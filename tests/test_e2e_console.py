"""The seed's console lines on the real demo (the shared v1, legacy and fully_async runs, VERL_PROGRESS_LOG=1
with telemetry on): every line in one of the seed's formats, each step's lines present and in order, and the
examples of docs/guides/console.md matching lines the demo printed (modulo numbers)."""

from __future__ import annotations

import re

import pytest

from helpers.console_lines import PATTERNS, SEED_EXAMPLES, kind, progress_lines, shape_of
from helpers.procs import ROOT

pytestmark = pytest.mark.verl


def test_patterns_are_the_seeds_formats():
    """Each pattern matches the seed's own examples of its kind (and no other pattern's)."""
    assert [kind(x) for x in SEED_EXAMPLES] == [
        "start",
        "heartbeat",
        "reward_done",
        "start",
        "done",
        "update_bar",
        "update_bar",
        "rollout_bar",
        "rollout_bar",
    ]
    assert not PATTERNS["start"].fullmatch("[VERL_PROGRESS][step=8] rollout start: prompts_shape=(128")


def _lines(run) -> list[str]:
    assert run.rc == 0, run.log_tail()
    lines = progress_lines(run.out / "demo.log")
    unknown = [x for x in lines if kind(x) is None]
    assert not unknown, unknown[:5]  # every line in one of the seed's formats
    return lines


def _of(lines: list[str], name: str) -> list[re.Match[str]]:
    return [m for m in (PATTERNS[name].fullmatch(x) for x in lines) if m]


def _trainer_checks(lines: list[str], steps: int, reward: bool) -> None:
    starts = _of(lines, "start")
    for step in range(1, steps + 1):
        rollout = [m for m in starts if m["step"] == str(step) and m["phase"] == "rollout"]
        assert len(rollout) == 1 and rollout[0]["n"] == "2" and rollout[0]["shape"], (step, rollout)
        assert "'global_steps'" in rollout[0]["meta"]  # the batch's meta keys, previewed
        bars = [
            m
            for m in _of(lines, "rollout_bar")
            if m["who"] == "rollout_manager" and m["mode"] == "train" and m["step"] == str(step)
        ]
        assert bars and bars[-1]["done"] == bars[-1]["total"] == "8", (step, bars)  # 4 prompts x n=2, all workers
        assert f"[VERL_PROGRESS][step={step}] update_actor start" in lines
    for i, line in enumerate(lines):  # each phase's start comes before its done
        m = PATTERNS["done"].fullmatch(line) or PATTERNS["reward_done"].fullmatch(line)
        if m:
            phase = "reward" if "reward_time" in line else m["phase"]
            assert any(
                PATTERNS["start"].fullmatch(x) and x.startswith(f"[VERL_PROGRESS][step={m['step']}] {phase} start")
                for x in lines[:i]
            ), line
    rewards = _of(lines, "reward_done")
    assert (len(rewards) == steps and all(m["keys"] for m in rewards)) if reward else not rewards
    assert {m["strategy"] for m in _of(lines, "update_bar")} == {"dp"}  # fsdp2 in the demo
    workers = {(m["role"], m["method"]) for m in _of(lines, "worker")}
    assert ("actor", "update_actor") in workers and ("actor", "compute_log_prob") in workers, workers


def test_v1_console(v1_run):
    lines = _lines(v1_run)
    _trainer_checks(lines, v1_run.steps, reward=False)  # v1 scores inside the agent loop: no reward phase
    # one timer per phase: a beat says a multiple of the period (5 s by default), never a shared clock
    assert not [m for m in _of(lines, "heartbeat") if float(m["elapsed"][:-1]) < 5.0]


def test_legacy_console(legacy_run):
    lines = _lines(legacy_run)
    _trainer_checks(lines, legacy_run.steps, reward=True)
    assert {m["role"] for m in _of(lines, "update_bar")} == {"actor", "critic"}  # gae: the critic's bar too


def test_fully_async_console(fully_async_run):
    lines = _lines(fully_async_run)
    bars = _of(lines, "rollout_bar")
    assert bars and not [m for m in bars if m["step"] == "-1"], "the rollouter's lines say the parameter version"
    assert {m["version"] is not None for m in bars} == {True}
    dones = [i for i, x in enumerate(lines) if re.fullmatch(r"\[VERL_PROGRESS\]\[step=\d+\] validate done: .*", x)]
    assert dones
    for i in dones:
        step = PATTERNS["done"].fullmatch(lines[i])["step"]
        assert f"[VERL_PROGRESS][step={step}] validate start" in lines[:i]
    assert _of(lines, "worker") and _of(lines, "update_bar")


def test_docs_console_examples_come_from_real_output(v1_run, legacy_run, fully_async_run):
    section = (ROOT / "docs/guides/console.md").read_text()
    examples = [
        x
        for block in re.findall(r"```text\n(.*?)```", section, re.S)
        for x in block.splitlines()
        if x.startswith("[VERL_PROGRESS]")
    ]
    assert len(examples) >= 8, examples
    printed = {
        shape_of(x) for run in (v1_run, legacy_run, fully_async_run) for x in progress_lines(run.out / "demo.log")
    }
    missing = [x for x in examples if shape_of(x) not in printed]
    assert not missing, missing
