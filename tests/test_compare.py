"""`verl-otel compare`: one run against another from synthetic step traces the OTel SDK wrote. A phase slower
in every step is named with an interval that excludes 1; noise is not; phases of one run only and step 0
are listed apart; the step spans' config values that differ are listed."""

from __future__ import annotations

import json
import time

import pytest

from helpers.run_pairs import BASE_PHASES, jitter, run_spans
from helpers.step_spans import verl_steps, write_lines

from verl_otel import semconv as sc
from verl_otel.analysis import compare as cp
from verl_otel.cli.main import main

T0 = time.time_ns() - 3600 * 10**9


def _compare(base_spans, other_spans) -> cp.Comparison:
    return cp.compare("a", verl_steps(base_spans), "b", verl_steps(other_spans))


def test_a_phase_twice_as_slow_in_every_step_is_named_the_others_within_noise():
    slow = {**BASE_PHASES, sc.PHASE_UPDATE_ACTOR: 2 * BASE_PHASES[sc.PHASE_UPDATE_ACTOR]}
    c = _compare(run_spans(T0, noise=jitter(1)), run_spans(T0, phases=slow, noise=jitter(2)))
    assert [p.phase for p in c.changed] == [sc.PHASE_UPDATE_ACTOR]
    actor = c.phases[0]
    assert actor.phase == sc.PHASE_UPDATE_ACTOR and actor.ratio == pytest.approx(2.0, rel=0.05)
    assert actor.low is not None and actor.high is not None and 1.0 < actor.low <= actor.ratio <= actor.high
    # per 1k tokens: the same tokens, twice the time
    assert actor.per_1k_ratio == pytest.approx(2.0, rel=0.05)
    assert actor.base_per_1k == pytest.approx(1000 * actor.base_s / 4000, rel=0.05)
    others = {p.phase: p for p in c.phases[1:]}
    assert set(others) == set(BASE_PHASES) - {sc.PHASE_UPDATE_ACTOR}
    for p in others.values():
        assert not p.changed and (p.ratio is None or abs(p.ratio - 1) < 0.05)
    assert others[sc.PHASE_ADV].ratio is None  # ~0 s in both: no ratio to speak of
    assert (c.base.steps, c.base.apart, c.other.steps, c.other.apart) == (8, [0], 8, [0])
    assert c.only_base == c.only_other == [] and c.differences == []


def test_noise_without_a_real_change_is_not_flagged():
    """+-30% per step in every phase, drawn differently in the two runs: the medians differ, the intervals
    hold 1 (or the move is under 10%), nothing is named."""
    moved = 0.0
    for seed in range(5):
        c = _compare(run_spans(T0, noise=jitter(seed, 0.3)), run_spans(T0, noise=jitter(100 + seed, 0.3)))
        assert c.changed == [], cp.to_text(c)
        rollout = next(p for p in c.phases if p.phase == sc.PHASE_ROLLOUT)
        assert rollout.low is not None and rollout.high is not None and rollout.low < 1 < rollout.high
        moved = max(moved, abs(rollout.ratio - 1))
    assert moved > 0.03  # the noise did move the medians: the test can fail


def test_the_interval_is_deterministic_and_needs_two_steps_a_side():
    base, other = [1.0, 1.1, 0.9, 1.05], [2.0, 2.1, 1.9]
    assert cp.bootstrap_ratio(base, other) == cp.bootstrap_ratio(base, other)
    low, high = cp.bootstrap_ratio(base, other) or (0, 0)
    assert 1.5 < low < 2 < high < 2.5
    assert cp.bootstrap_ratio([1.0], other) is None


def test_a_short_phase_must_move_by_min_move_s_to_be_named():
    """3 steps a side that do not overlap: the interval excludes 1 whatever the move (with 3 steps, the resampled
    median is one of the run's steps). A short phase 40% slower by 40 ms is what identical runs on a loaded host
    show (compare.MIN_MOVE_S); twice as slow by 100 ms is named."""
    for moved_s, named in ((0.04, False), (0.1, True)):
        slow = {**BASE_PHASES, sc.PHASE_UPDATE_WEIGHTS: BASE_PHASES[sc.PHASE_UPDATE_WEIGHTS] + moved_s}
        c = _compare(run_spans(T0, steps=3, noise=jitter(1)), run_spans(T0, steps=3, phases=slow, noise=jitter(2)))
        weights = next(p for p in c.phases if p.phase == sc.PHASE_UPDATE_WEIGHTS)
        assert weights.low is not None and weights.low > 1 and weights.ratio is not None and weights.ratio > 1.3
        assert weights.changed is named and [p.phase for p in c.changed] == [sc.PHASE_UPDATE_WEIGHTS] * named
    assert f"moved >= 10% and >= {cp.MIN_MOVE_S:g}s" in cp.to_text(c)


def test_what_a_step_measured_is_no_config_value():
    """The goodput buckets' GPU-seconds, the goodput ratio and the step's GPU-seconds are measurements (the same in
    every step of a run only by chance, e.g. a bucket at 0): not listed as what differed. The GPUs accounted are."""
    measured = {sc.ATTR_GOODPUT_RATIO: 0.5, f"{sc.ATTR_GOODPUT_PREFIX}{sc.BUCKET_VALUES}": 0.0}
    base = run_spans(T0, attrs={**measured, sc.ATTR_STEP_GPU_SECONDS: 3.0, sc.ATTR_GOODPUT_GPUS: 1})
    other = run_spans(T0, attrs={sc.ATTR_GOODPUT_RATIO: 0.7, sc.ATTR_STEP_GPU_SECONDS: 4.0, sc.ATTR_GOODPUT_GPUS: 2})
    c = _compare(base, other)
    assert c.differences == [(sc.ATTR_GOODPUT_GPUS, 1, 2)]
    assert sc.ATTR_GOODPUT_RATIO not in c.base.config and sc.ATTR_STEP_GPU_SECONDS not in c.other.config


def test_phases_of_one_run_only_are_listed_apart():
    base = {**BASE_PHASES, sc.PHASE_VALUES: 0.4}
    other = {**BASE_PHASES, sc.PHASE_SAVE_CHECKPOINT: 1.5}
    c = _compare(run_spans(T0, phases=base), run_spans(T0, phases=other))
    assert c.only_base == [sc.PHASE_VALUES] and c.only_other == [sc.PHASE_SAVE_CHECKPOINT]
    assert {p.phase for p in c.phases} == set(BASE_PHASES)
    text = cp.to_text(c)
    assert f"only in the baseline: {sc.PHASE_VALUES}" in text
    assert f"only in the other run: {sc.PHASE_SAVE_CHECKPOINT}" in text


def test_config_values_verl_version_trainer_and_samples_that_differ_are_listed():
    base = run_spans(T0, attrs={sc.ATTR_VERL_VERSION: "0.7.0", sc.ATTR_TRAINER: sc.TRAINER_LEGACY})
    other = run_spans(
        T0,
        steps=6,
        attrs={sc.ATTR_VERL_VERSION: "0.9.1", sc.ATTR_TRAINER_MODE: "sync", sc.ATTR_ROLLOUT_N: 4},
        samples=16,
    )
    c = _compare(base, other)
    assert c.differences == [
        (sc.ATTR_ROLLOUT_N, 2, 4),
        (sc.ATTR_TRAINER, sc.TRAINER_LEGACY, sc.TRAINER_V1),
        (sc.ATTR_TRAINER_MODE, None, "sync"),
        (sc.ATTR_VERL_VERSION, "0.7.0", "0.9.1"),
    ]  # the per-step ones (global step, epoch, tokens) are not config
    assert (c.base.samples, c.other.samples) == (8 * 8, 6 * 16)
    assert (c.base.tokens, c.other.tokens) == (8 * 4000, 6 * 4000)
    text = cp.to_text(c)
    assert f"{sc.ATTR_TRAINER}: {sc.TRAINER_LEGACY} -> {sc.TRAINER_V1}" in text
    assert f"{sc.ATTR_TRAINER_MODE}: (unset) -> sync" in text and "samples: 64 -> 96" in text


def test_the_cli_reads_files_and_directories_text_and_json(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    write_lines(tmp_path / "a" / sc.TRACES_FILE, run_spans(T0))
    slow = {**BASE_PHASES, sc.PHASE_UPDATE_ACTOR: 2.0}
    write_lines(tmp_path / "b.jsonl", run_spans(T0, phases=slow, noise=jitter(2), attrs={sc.ATTR_ROLLOUT_N: 4}))
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b.jsonl"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["changed"] == [sc.PHASE_UPDATE_ACTOR]
    assert doc["baseline"]["source"] == str(tmp_path / "a" / sc.TRACES_FILE) and doc["baseline"]["steps_apart"] == [0]
    actor = doc["phases"][0]
    assert actor["phase"] == sc.PHASE_UPDATE_ACTOR and actor["changed"] and actor["ci_low"] > 1
    assert doc["differences"] == [{"attribute": sc.ATTR_ROLLOUT_N, "baseline": 2, "other": 4}]
    assert doc["interval"] == {"confidence": 0.95, "resamples": 2000, "seed": 0, "min_change": 0.1, "min_move_s": 0.05}
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b.jsonl")]) == 0
    text = capsys.readouterr().out
    changed, _, rest = text.partition("within noise:")
    assert "changed beyond noise" in changed and sc.PHASE_UPDATE_ACTOR in changed and sc.PHASE_ROLLOUT in rest
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "missing")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_two_runs_in_jaeger_by_project_and_experiment(capsys):
    """With --jaeger: both runs read from one Jaeger search (paged), told apart by the step spans'
    verl.project / verl.experiment."""
    from helpers.jaeger import FakeJaeger, Storage
    from helpers.step_spans import otlp_json

    slow = {**BASE_PHASES, sc.PHASE_UPDATE_ACTOR: 2.0}
    t0 = time.time_ns() - 600 * 10**9
    spans = run_spans(t0, attrs={sc.ATTR_PROJECT: "p", sc.ATTR_EXPERIMENT: "base"}) + run_spans(
        t0 + 100 * 10**9, phases=slow, noise=jitter(2), attrs={sc.ATTR_PROJECT: "p", sc.ATTR_EXPERIMENT: "new"}
    )
    flat = [sp for rs in otlp_json(spans)["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"]]
    j = FakeJaeger({"/api/v3/traces": Storage(flat).v3})
    try:
        assert main(["compare", "--jaeger", j.url, "--since", "1h", "p/base", "p/new", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["changed"] == [sc.PHASE_UPDATE_ACTOR] and (doc["baseline"]["steps"], doc["other"]["steps"]) == (8, 8)
        assert doc["differences"] == [{"attribute": sc.ATTR_EXPERIMENT, "baseline": "base", "other": "new"}]
        assert doc["baseline"]["source"] == f"p/base in Jaeger at {j.url}"
        assert main(["compare", "--jaeger", j.url, "p/base", "p/missing"]) == 2
        assert "no training step traces of run 'p/missing'" in capsys.readouterr().err
        assert main(["compare", "--jaeger", j.url, "p/base", "nameless"]) == 2
        assert "PROJECT/EXPERIMENT" in capsys.readouterr().err
    finally:
        j.close()
