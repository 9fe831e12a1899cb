"""`verl-otel compare` over two real runs that differ by one slowed phase: the shared v1 run (3 steps, its one-step
plants in step 3: update_actor and the rollout's long tail) against the same trainer and steps with ref slowed in
every step. ref is named as changed, first, with an interval above 1; every other phase is within noise (or, a
short one, moved by less than this CPU's noise); the step spans say nothing differed (the --slow plant is no step
span attribute).

What keeps the others within noise, with 3 steps a side (where the interval excludes 1 exactly when the two runs'
steps do not overlap): update_actor's and the rollout's step-3 plants in the baseline and old_log_prob's first step
(its warm-up, ~1.5-2x its later ones in every run) keep the runs' steps overlapping when the host's load differs
between the runs; the 2-s phases (rollout, validate) move under 10%; the short ones (adv, update_weights) under
compare's 0.05 s. ref's first step is barely longer than its others, so ref (not old_log_prob) is the one slowed."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.verl_runs import PROGRESS_LOG, STALL_MATRIX, DemoRun, start_demo

from verl_otel import semconv as sc
from verl_otel.analysis.step_stream import read_steps

pytestmark = pytest.mark.verl

SLOWED = sc.PHASE_REF
#: seconds each step's ref sleeps: the v1 demo's ref takes ~0.1-0.25 s, so the slowed run's fastest step is several
#: times the baseline's slowest
SLOW_S = 1.0
STEPS = 3  # the shared v1 run's
#: what this CPU's load moves a short phase's median by between two runs (old_log_prob's 0.1-0.2 s: up to 2x, its
#: medians 0.11 and 0.22 s in two runs minutes apart); a fourth of the plant, which moves ref by ~1 s
NOISE_S = 0.25


@pytest.fixture(scope="module")
def slowed_run(tmp_path_factory) -> DemoRun:
    """The one run this module adds: v1 as the shared v1_run, ref slowed in every step (the plant counts the
    worker's calls, one a step). Under the load v1_run runs under (`verl-otel top` watching it, its settings): the
    host's load moves a run's short phases as a whole, which no interval from one run's steps sees. No scrape (its
    linger would cost 12 s)."""
    from helpers.top_probe import TopProbe

    plants = [f"{SLOWED}@{step}={SLOW_S:g}" for step in range(1, STEPS + 1)]
    probe = TopProbe()
    out = tmp_path_factory.mktemp("demo-v1-slowed")
    run = start_demo(out, "v1", STEPS, plants, scrape=False, probe=probe, extra_env=PROGRESS_LOG | STALL_MATRIX)
    probe.stop()
    return run


def _per_step(run: DemoRun) -> dict[str, dict[int, float]]:
    """Each phase's seconds in each step of the run's trace (what compare reads)."""
    steps, _ = read_steps(run.out / sc.TRACES_FILE, 0, samples_kept=0)
    out: dict[str, dict[int, float]] = {}
    for s in steps:
        for phase, seconds in s.phases.items():
            out.setdefault(phase, {})[s.global_step] = round(seconds, 3)
    return out


def _compare(base: Path, other: Path, *args: str) -> str:
    cmd = [sys.executable, "-m", "verl_otel.cli.main", "compare", str(base), str(other), *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout


def test_compare_names_the_slowed_phase_and_the_others_within_noise(v1_run, slowed_run):
    assert v1_run.rc == 0, v1_run.log_tail()
    assert slowed_run.rc == 0, slowed_run.log_tail()
    base, other = _per_step(v1_run), _per_step(slowed_run)
    seen = f"per-step seconds, baseline {base}, slowed {other}"
    training = range(1, STEPS + 1)
    # the plant took: every step's ref in the slowed run is well above the baseline's slowest
    assert min(other[SLOWED][n] for n in training) > max(base[SLOWED][n] for n in training) + 0.5 * SLOW_S, seen

    doc = json.loads(_compare(v1_run.out, slowed_run.out, "--json"))
    phases = {p["phase"]: p for p in doc["phases"]}
    assert doc["changed"][0] == SLOWED, (doc["changed"], seen)  # the largest change first
    assert doc["phases"][0]["phase"] == SLOWED
    slowed = phases[SLOWED]
    assert slowed["changed"] and slowed["ratio"] > 1 and 1 < slowed["ci_low"] <= slowed["ratio"] <= slowed["ci_high"]
    assert slowed["other_s"] - slowed["baseline_s"] > 0.8 * SLOW_S, slowed
    assert (slowed["baseline_steps"], slowed["other_steps"]) == (STEPS, STEPS)
    # every other phase both runs ran is within noise, the baseline's one-step plants (update_actor, the rollout's
    # long tail in step 3) included
    both = (set(base) & set(other)) - {SLOWED}
    assert set(phases) == both | {SLOWED}, (sorted(phases), seen)
    assert {sc.PHASE_UPDATE_ACTOR, sc.PHASE_ROLLOUT, sc.PHASE_OLD_LOG_PROB, sc.PHASE_ADV} <= both
    # compare's floor (a move of 0.05 s) is under this shared CPU's noise on a 0.1-0.2 s phase: a short phase may
    # cross it (old_log_prob did, 0.10 -> 0.16 s and 0.22 -> 0.11 s, the runs' steps apart); a move of the plant's
    # order may not
    flagged = [p for p in both if phases[p]["changed"]]
    assert all(abs(phases[p]["other_s"] - phases[p]["baseline_s"]) < NOISE_S for p in flagged), (flagged, seen)
    assert doc["changed"] == [SLOWED, *(p for p in doc["changed"] if p in flagged)], (doc["changed"], seen)
    assert doc["only_baseline"] == doc["only_other"] == []
    # what differed: nothing the step spans carry (the same trainer, mode, verl version, sizes, steps planned; the
    # plant is no step span attribute; the scrape, probe and stall thresholds of the shared run are not either)
    assert doc["differences"] == [], doc["differences"]
    version = importlib.metadata.version("verl")
    for run in ("baseline", "other"):
        config = doc[run]["config"]
        assert config[sc.ATTR_TRAINER] == sc.TRAINER_V1 and config[sc.ATTR_VERL_VERSION] == version, config
        assert doc[run]["steps"] == STEPS and doc[run]["steps_apart"] == [0]
    assert doc["baseline"]["samples"] == doc["other"]["samples"] == 4 * 2 * STEPS  # batch 4 x n 2 a step

    text = _compare(v1_run.out, slowed_run.out)
    changed, _, rest = text.partition("within noise:")
    assert "changed beyond noise" in changed and f"  {SLOWED} " in changed, text
    assert all(f"  {p} " in rest and f"  {p} " not in changed for p in both - set(flagged)), text
    assert all(f"  {p} " in changed for p in flagged), text
    _, _, differed = rest.partition("what differed between the runs")
    # samples and tokens only: no step span attribute differs
    assert [line.split(":")[0] for line in differed.splitlines()[1:]] == ["  samples", "  tokens"], text
