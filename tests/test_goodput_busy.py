"""The measured busy share joined into the goodput buckets (telemetry/goodput.py::busy_of, step_split) and read
back (analysis/goodput.py): a phase's share lands on its bucket (the rollout's on generating and long_tail), only
on buckets that hold GPU time, absent (not 0) where nothing was measured; a run's share is weighted by each step's
GPU-seconds in the bucket, and a useful bucket whose GPUs were mostly waiting gets advice."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from verl_otel import semconv as sc
from verl_otel.analysis import goodput as reader
from verl_otel.telemetry.goodput import account, busy_of, pools_of, step_split

PHASES = [
    ("rollout", 0.0, 10.0),
    ("reward", 10.0, 11.0),
    ("old_log_prob", 11.0, 13.0),
    ("update_actor", 13.5, 18.0),
    ("update_weights", 18.0, 19.0),
]


class Answers:
    """What the trainer's GPU processes answered for each step (hooks/goodput.py::RayGpuBusy in a run)."""

    def __init__(self, by_step: Mapping[int, Mapping[str, float]]) -> None:
        self.by_step = by_step
        self.read: list[int] = []

    def shares(self, step: int) -> Mapping[str, float] | None:
        self.read.append(step)
        return self.by_step.get(step)


def test_a_phases_share_lands_on_its_bucket_and_nowhere_unmeasured() -> None:
    split = account(0.0, 20.0, PHASES, pools_of(4, None), rollout_busy_s=6.0)
    got = busy_of(split, {"rollout": 0.7, "update_actor": 0.41, "update_weights": 0.9, "values": 0.5, "x": 1.0})
    # the rollout's one reading on both of its buckets; the weight sync is no BUSY_BUCKET; values held no time
    assert got == {"generating": 0.7, "long_tail": 0.7, "update_actor": 0.41}
    split.busy = got
    attrs = split.attributes()
    assert attrs[sc.busy_attr("update_actor")] == 0.41 and attrs["verl.goodput.busy_share.generating"] == 0.7
    assert sc.busy_attr("old_log_prob") not in attrs  # not measured: absent, not 0
    assert busy_of(split, {"ref": 7.0}) == {} and busy_of(split, None) == {}  # no ref time in this step
    split2 = account(0.0, 20.0, [*PHASES, ("ref", 19.0, 19.5)], pools_of(4, None), rollout_busy_s=6.0)
    assert busy_of(split2, {"ref": 7.0, "old_log_prob": -1}) == {"ref": 1.0, "old_log_prob": 0.0}  # clamped
    # the buckets still add up: the busy share is beside them, no bucket
    assert sum(v for k, v in attrs.items() if k[len(sc.ATTR_GOODPUT_PREFIX) :] in sc.BUCKETS) == pytest.approx(80.0)


def test_the_step_tracers_join_reads_its_steps_answers() -> None:
    answers = Answers({3: {"update_actor": 0.41, "old_log_prob": 0.8}})
    split = step_split(pools_of(2, None), (0.0, 20.0), PHASES, 3, None, answers)
    assert split is not None and split.busy == {"update_actor": 0.41, "old_log_prob": 0.8}
    assert step_split(pools_of(2, None), (0.0, 20.0), PHASES, 4, None, answers).busy == {}  # none in for step 4
    assert step_split(pools_of(2, None), (0.0, 20.0), PHASES, 5, None, None).busy == {}  # no GPU process asked
    assert answers.read == [3, 4]


def _step(step: int, update_actor_s: float, busy: dict[str, float]) -> reader.StepSplit:
    phases = [("rollout", 0.0, 10.0), ("update_actor", 10.0, 10.0 + update_actor_s)]
    split = account(0.0, 20.0, phases, pools_of(1, None), rollout_busy_s=6.0)
    split.busy = busy_of(split, busy)
    got = reader.of_attributes(split.attributes(), step)
    assert got is not None
    return got


def test_the_run_reads_it_back_weighted_and_advises_on_a_mostly_waiting_bucket() -> None:
    steps = [
        _step(1, 8.0, {"update_actor": 0.3, "rollout": 0.9}),
        _step(2, 2.0, {"update_actor": 0.9}),  # a short update, busier: weighs a quarter of step 1's
        _step(3, 8.0, {}),  # unmeasured (its answers not in): left out of the mean, not a 0
    ]
    assert steps[0].busy == {"update_actor": 0.3, "generating": 0.9, "long_tail": 0.9}
    assert steps[2].busy == {}
    summary = reader.summarize(steps)
    busy = summary.busy()
    assert busy["update_actor"] == pytest.approx((0.3 * 8 + 0.9 * 2) / 10)
    assert busy["generating"] == pytest.approx(0.9) and sc.BUCKET_OLD_LOG_PROB not in busy
    [(bucket, share, measured, text)] = summary.low_busy()
    assert (bucket, measured) == ("update_actor", pytest.approx(0.42)) and share > reader.ADVICE_MIN_SHARE
    text = reader.to_text(summary)
    assert "update_actor: 42% of its GPU time measured busy" in text and "micro-batches" in text
    got = reader.to_json(summary)
    assert got["busy_share"]["update_actor"] == pytest.approx(0.42)
    assert [s.get("busy_share") for s in got["steps"]][1:] == [{"update_actor": 0.9}, None]
    assert {"bucket": "update_actor", "busy_share": 0.42}.items() <= got["advice"][-1].items()
    unmeasured = reader.summarize([steps[2]])
    assert "busy_share" not in reader.to_json(unmeasured) and not unmeasured.low_busy()
    text = reader.to_text(unmeasured)
    assert "no measured busy share" in text and "measured busy" not in text.replace("no measured busy share", "")
