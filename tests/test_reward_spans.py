"""RewardSpans' bookkeeping: per trainer span the call count and only the K slowest calls, emitted
once the group is idle (the span output itself is checked on the real runs in test_e2e_demo.py)."""

from __future__ import annotations

import time

from verl_otel import trackers
from verl_otel.telemetry.reward_spans import RewardSpans


class Collecting(RewardSpans):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.emitted = []

    def _emit(self, parent, group):  # what would be exported
        self.emitted.append(
            (
                parent,
                group.calls,
                group.errors,
                sorted(c.end_ns - c.start_ns for _, _, c in group.slowest),
                group.first_ns,
                group.last_ns,
            )
        )


def test_keeps_the_k_slowest_and_counts_all(monkeypatch):
    spans = Collecting(trackers.current().services, max_spans=3, idle_s=0.2, background=False)
    durations = [5, 1, 9, 3, 7, 2, 8]
    for i, d in enumerate(durations):
        spans.record("tp-a", 1000 + i, 1000 + i + d, {}, RuntimeError("x") if d == 3 else None)
    spans.record("tp-b", 50, 60, {})
    assert spans.emit() == 0, "nothing is idle yet"
    time.sleep(0.3)
    spans.record("tp-b", 70, 75, {})  # b is busy again
    assert spans.emit() == 1
    parent, calls, errors, kept, first, last = spans.emitted[0]
    assert (parent, calls, errors, kept) == ("tp-a", 7, 1, [7, 8, 9])
    assert (first, last) == (1000, 1000 + 6 + 8)
    assert spans.emit(idle_only=False) == 1 and spans.emitted[1][:2] == ("tp-b", 2)


def test_zero_spans_still_counts(monkeypatch):
    spans = Collecting(trackers.current().services, max_spans=0, idle_s=0.0, background=False)
    spans.record("tp", 0, 5, {})
    spans.record("tp", 1, 9, {})
    assert spans.emit(idle_only=False) == 1
    assert spans.emitted[0][1:4] == (2, 0, [])


def test_background_flush_after_idle(monkeypatch):
    spans = Collecting(trackers.current().services, max_spans=2, idle_s=0.2)
    spans.record("tp", 0, 5, {})
    deadline = time.monotonic() + 3
    while not spans.emitted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [e[:2] for e in spans.emitted] == [("tp", 1)]


def test_batch_reward_path_joins_the_reward_phase(tmp_path):
    """verl's batch path (RewardLoopManager.compute_rm_score, run by a trainer with a colocated reward
    model): each row's compute_score call in the real reward-loop worker actor is counted under the
    trainer's ``reward`` phase, and the trainer's batch is handed back without our column."""
    import json
    from pathlib import Path

    from helpers.procs import clean_env, run_py
    from helpers.traces import load_spans

    from verl_otel.demo import assets

    here = Path(__file__).resolve().parent
    asset_dir = assets.build(tmp_path / "assets")
    proc = run_py(
        [str(here / "drive_reward_batch.py"), str(asset_dir), str(tmp_path / "record.json")],
        clean_env(VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp_path)),
        tmp_path,
        timeout=240,
    )
    assert proc.returncode == 0 and "DRIVE_REWARD_BATCH_DONE" in proc.stdout, (proc.stdout[-3000:], proc.stderr[-3000:])
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["rm_scores_shape"][0] == 4 and record["keys_after"] == record["keys_before"]
    spans = load_spans(tmp_path / "traces.jsonl")
    (reward,) = [s for s in spans if s.name == "reward" and s.attributes.get("verl.global_step") == 3]
    (group,) = [s for s in spans if s.name == "reward.worker"]
    assert (group.trace_id, group.parent_id) == (reward.trace_id, reward.span_id)
    assert group.resource["verl.process.role"] == "reward_worker"
    assert group.attributes["verl.reward.calls"] == 4
    calls = [s for s in spans if s.name == "reward.compute_score" and s.parent_id == group.span_id]
    assert len(calls) == group.attributes["verl.reward.calls_spanned"] > 0
    assert {c.attributes["verl.sample.index"] for c in calls} <= {0, 1, 2, 3}
