"""The goodput split (telemetry/goodput.py) on synthetic timelines: the buckets add up to the pools' GPU time
whatever the phases' nesting and overlap, and each edge case lands in its bucket."""

from __future__ import annotations

import time

import pytest

from verl_otel import semconv as sc
from verl_otel.telemetry.goodput import Pool, account, occupancy_seconds, pools_of
from verl_otel.telemetry.rollout import RolloutTracker

COLOCATED = pools_of(4, None)


def test_a_sync_step_splits_by_phase_and_adds_up() -> None:
    phases = [
        ("rollout", 0.0, 10.0),
        ("reward", 10.0, 11.0),
        ("old_log_prob", 11.0, 13.0),
        ("adv", 13.0, 13.5),
        ("update_actor", 13.5, 18.0),
        ("update_weights", 18.0, 19.0),
    ]
    split = account(0.0, 20.0, phases, COLOCATED, rollout_busy_s=6.0)
    b = split.totals()
    assert split.gpu_seconds == pytest.approx(20.0 * 4)
    assert b["generating"] == pytest.approx(6.0 * 4)
    assert b["long_tail"] == pytest.approx(4.0 * 4)
    assert b["old_log_prob"] == pytest.approx(2.0 * 4)
    assert b["update_actor"] == pytest.approx(4.5 * 4)
    assert b["weight_sync"] == pytest.approx(4.0)
    # reward, adv and the gap after the weight sync: the driver's own work
    assert b["idle"] == pytest.approx((1.0 + 0.5 + 1.0) * 4)
    assert split.ratio == pytest.approx((6.0 + 2.0 + 4.5) / 20.0)
    attrs = split.attributes()
    assert attrs[sc.ATTR_STEP_GPU_SECONDS] == pytest.approx(80.0)
    assert sum(v for k, v in attrs.items() if k[len(sc.ATTR_GOODPUT_PREFIX) :] in sc.BUCKETS) == pytest.approx(80.0)


def test_validation_and_checkpoint_in_one_step_nest_under_their_own_buckets() -> None:
    # the validation's own generation runs inside it (no rollout phase of its own): all validation
    phases = [
        ("rollout", 0.0, 4.0),
        ("update_actor", 4.0, 6.0),
        ("validate", 6.0, 9.0),
        ("save_checkpoint", 9.0, 10.0),
    ]
    split = account(0.0, 10.0, phases, COLOCATED, rollout_busy_s=None)
    b = split.totals()
    assert not split.measured
    assert b["generating"] == pytest.approx(16.0) and b["long_tail"] == 0.0  # unmeasured: all generating
    assert b["validation"] == pytest.approx(12.0)
    assert b["checkpoint"] == pytest.approx(4.0)
    assert split.gpu_seconds == pytest.approx(40.0)


def test_overlapping_async_phases_are_counted_once_by_the_innermost() -> None:
    # v1's async modes: a weight sync inside the rollout, an update overlapping its end; the standalone rollout
    # pool generates past the rollout phase (the next step's samples), taken from its idle time
    pools = pools_of(2, 2)
    phases = [("rollout", 0.0, 6.0), ("update_weights", 2.0, 3.0), ("update_actor", 5.0, 9.0)]
    split = account(0.0, 10.0, phases, pools, rollout_busy_s=8.0)
    assert split.gpu_seconds == pytest.approx(10.0 * 4)
    colocated, rollout = split.pools[sc.POOL_COLOCATED], split.pools[sc.POOL_ROLLOUT]
    # rollout phase time outside the nested ones: 0-2, 3-5 (4 s); the update wins 5-9 (it started last)
    assert colocated["generating"] + colocated["long_tail"] == pytest.approx(4.0 * 2)
    assert colocated["update_actor"] == pytest.approx(4.0 * 2)
    assert colocated["weight_sync"] == pytest.approx(1.0 * 2)
    assert rollout["update_actor"] == 0.0  # a rollout-only pool does not train
    assert rollout["generating"] == pytest.approx(8.0 * 2)  # 4 s in the phase + 4 s of its idle
    assert sum(rollout.values()) == pytest.approx(20.0)


def test_fully_async_trainer_waits_for_samples() -> None:
    split = account(0.0, 5.0, [("rollout", 0.0, 3.0), ("update_actor", 3.0, 5.0)], pools_of(2, None, True), None)
    b = split.totals()
    assert b["waiting_for_samples"] == pytest.approx(6.0)
    assert b["generating"] == 0.0
    assert b["update_actor"] == pytest.approx(4.0)


def test_a_worker_that_never_got_a_sample_is_long_tail() -> None:
    # two agent-loop workers share the replicas; one did 3 s of full occupancy, the other got nothing
    busy = occupancy_seconds([(12.0, 4)], workers=2)
    assert busy == pytest.approx(1.5)
    split = account(0.0, 3.0, [("rollout", 0.0, 3.0)], [Pool(sc.POOL_COLOCATED, 2, True, True)], busy)
    assert split.totals()["long_tail"] == pytest.approx(1.5 * 2)
    assert occupancy_seconds([], 2) is None


def test_phases_outside_the_step_are_clipped() -> None:
    split = account(10.0, 12.0, [("rollout", 5.0, 11.0), ("update_actor", 11.5, 30.0)], COLOCATED, None)
    assert split.gpu_seconds == pytest.approx(8.0)
    assert split.totals()["update_actor"] == pytest.approx(0.5 * 4)


def test_the_tracker_measures_occupancy_with_a_long_tail() -> None:
    tracker = RolloutTracker()
    tracker.batch_started(sc.MODE_TRAIN, 3, 4, None)
    tokens = [tracker.sample_started(sc.MODE_TRAIN) for _ in range(4)]
    time.sleep(0.05)
    for t in tokens[:3]:
        tracker.sample_finished(sc.MODE_TRAIN, t, {}, None)
    time.sleep(0.2)  # one straggler alone: a quarter of the peak
    tracker.sample_finished(sc.MODE_TRAIN, tokens[3], {}, None)
    area, peak = tracker.occupancy(sc.MODE_TRAIN, 3) or (0.0, 0)
    assert peak == 4
    assert 0.05 * 4 + 0.2 <= area < 0.05 * 4 + 0.2 + 0.1
    tracker.batch_started(sc.MODE_TRAIN, 4, 1, None)  # the next step's: step 3's stays readable
    assert tracker.occupancy(sc.MODE_TRAIN, 3) == (area, peak)
    assert tracker.occupancy(sc.MODE_TRAIN, 9) is None


def test_pools_from_verls_config() -> None:
    from verl_otel.hooks.verl_objects import pools

    cfg = {
        "trainer": {"nnodes": 2, "n_gpus_per_node": 8},
        "actor_rollout_ref": {"rollout": {"nnodes": 0, "n_gpus_per_node": 8}},  # verl's default: colocated
    }
    assert pools(cfg, sc.TRAINER_LEGACY) == [Pool(sc.POOL_COLOCATED, 16, True, True)]
    cfg["actor_rollout_ref"]["rollout"]["nnodes"] = 1  # separate_async's standalone replicas
    assert pools(cfg, sc.TRAINER_V1) == [Pool(sc.POOL_COLOCATED, 16, True, True), Pool(sc.POOL_ROLLOUT, 8, True, False)]
    assert pools(cfg, sc.TRAINER_FULLY_ASYNC) == [Pool(sc.POOL_TRAIN, 16, False, True)]
    assert pools({}, sc.TRAINER_LEGACY) == [Pool(sc.POOL_COLOCATED, 1, True, True)]  # unknown: one
