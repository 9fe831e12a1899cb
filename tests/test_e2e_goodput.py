"""Where the GPU hours go (issue 36) on the shared real runs (conftest.py): every training step's span carries its
GPU time and buckets that add up to it within 1%; the legacy run's planted long tail (``rollout_sample@3=6``) and
the v1 run's (``rollout_sample@3=2``) grow the long-tail bucket in step 3, named by ``slow-steps`` and ``goodput``;
fully_async's trainer waits for samples while its rollouter accounts the rollout pool; separate_async's standalone
rollout pool is accounted apart; the counters reach a real Prometheus."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys

import pytest

from helpers.top_probe import WIDTH
from helpers.traces import load_spans, steps

from verl_otel import semconv as sc

pytestmark = pytest.mark.verl

TAIL_STEP = 3


def _training(run) -> dict:
    assert run.rc == 0, run.log_tail()
    by_step = steps(load_spans(run.out / "traces.jsonl"))
    return {n: t for n, t in by_step.items() if n >= 1 and not t.root.attributes.get(sc.ATTR_STOPPED)}


def _buckets(root) -> dict[str, float]:
    return {b: root.attributes[sc.bucket_attr(b)] for b in sc.BUCKETS}


def _goodput(run, *args: str) -> str:
    cmd = [sys.executable, "-m", "verl_otel.cli.main", "goodput", "--file", str(run.out / "traces.jsonl"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _adds_up(training: dict) -> None:
    assert training
    for number, tree in training.items():
        root = tree.root
        gpu_s = root.attributes[sc.ATTR_STEP_GPU_SECONDS]
        gpus = root.attributes[sc.ATTR_GOODPUT_GPUS]
        # the step's GPU time is its GPUs x its wall time (the tracer's clock against the span's stamps)
        assert gpu_s == pytest.approx(gpus * root.seconds, rel=0.01, abs=0.01), (number, root.attributes)
        assert sum(_buckets(root).values()) == pytest.approx(gpu_s, rel=0.01), (number, root.attributes)


def _tails(training: dict) -> tuple[float, float]:
    """(the planted step's long-tail bucket, the median of the other steps')."""
    tails = {n: t.root.attributes[sc.bucket_attr(sc.BUCKET_LONG_TAIL)] for n, t in training.items()}
    assert all(t.root.attributes[sc.ATTR_GOODPUT_TAIL_MEASURED] for t in training.values())
    assert max(tails, key=tails.__getitem__) == TAIL_STEP, tails
    return tails[TAIL_STEP], statistics.median(v for n, v in tails.items() if n != TAIL_STEP)


def test_legacy_buckets_add_up_and_the_planted_tail_grows(legacy_run):
    training = _training(legacy_run)
    _adds_up(training)
    tail, median = _tails(training)
    assert tail > 2 * median + 0.5, (tail, median)
    root = training[TAIL_STEP].root
    assert root.attributes[sc.bucket_attr(sc.BUCKET_LONG_TAIL)] >= 0.5 * 6.0  # most of the 6 s tail
    for tree in training.values():  # a colocated pool: no starved trainer, no standalone rollout
        assert tree.root.attributes[sc.bucket_attr(sc.BUCKET_WAITING_FOR_SAMPLES)] == 0.0
        assert tree.root.attributes[sc.bucket_attr(sc.BUCKET_UPDATE_ACTOR)] > 0


def test_legacy_goodput_summary_names_the_tail(legacy_run):
    training = _training(legacy_run)
    summary = json.loads(_goodput(legacy_run, "--json"))
    assert [s["step"] for s in summary["steps"]] == sorted(training)
    for row in summary["steps"]:
        root = training[row["step"]].root
        assert row["gpu_seconds"] == pytest.approx(root.attributes[sc.ATTR_STEP_GPU_SECONDS])
        assert row["buckets"] == pytest.approx(_buckets(root))
    assert summary["gpu_seconds"] == pytest.approx(sum(r["gpu_seconds"] for r in summary["steps"]))
    assert TAIL_STEP in summary["worst_steps"]
    assert sc.BUCKET_LONG_TAIL in [a["bucket"] for a in summary["advice"]]
    text = _goodput(legacy_run)
    assert f"step {TAIL_STEP}: goodput" in text
    tail_line = next(line for line in text.splitlines() if line.startswith(f"  step {TAIL_STEP}:"))
    assert "waiting for the long tail" in tail_line, text
    assert "waiting for the long tail cost" in text, text


def test_slow_steps_says_which_bucket_grew(legacy_run):
    cmd = [sys.executable, "-m", "verl_otel.cli.main", "slow-steps", "--file", str(legacy_run.out / "traces.jsonl")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    blocks = re.split(r"\n(?=#\d)", proc.stdout)
    block = next(b for b in blocks if f" step {TAIL_STEP} " in b.splitlines()[0])
    assert "GPU time grew: waiting for the long tail" in block, proc.stdout


def test_legacy_counters_reach_prometheus(legacy_run):
    training = _training(legacy_run)
    by_bucket = legacy_run.prom.scalar_by(f"sum by (bucket) ({sc.GPU_SECONDS.name})", sc.LABEL_BUCKET)
    total = sum(t.root.attributes[sc.ATTR_STEP_GPU_SECONDS] for t in training.values())
    assert sum(by_bucket.values()) == pytest.approx(total, rel=0.01), by_bucket
    pools = legacy_run.prom.scalar_by(f"sum by (pool) ({sc.GPU_SECONDS.name})", sc.LABEL_POOL)
    assert set(pools) == {sc.POOL_COLOCATED}
    ratio = legacy_run.prom.scalar_by(sc.GOODPUT_RATIO.name)
    assert ratio and all(0 < v <= 1 for v in ratio.values())


def test_v1_buckets_add_up_and_its_tail_grows(v1_run):
    training = _training(v1_run)
    _adds_up(training)
    # v1's rollout phase holds more than its samples (TransferQueue, the replay buffer): every step has some
    # long tail (1.8 s here), and the planted 2 s sample adds to it in step 3 (+1.8 s measured)
    tail, median = _tails(training)
    assert tail - median >= 0.5 * 2.0, (tail, median)


def test_fully_async_trainer_pool_waits_for_samples(fully_async_run):
    training = _training(fully_async_run)
    _adds_up(training)
    for number, tree in training.items():
        b = _buckets(tree.root)
        # the trainer's own pool: no rollout on it, its rollout phase is a wait for the rollouter's samples
        assert b[sc.BUCKET_GENERATING] == 0.0 and b[sc.BUCKET_LONG_TAIL] == 0.0, (number, b)
        assert b[sc.BUCKET_WAITING_FOR_SAMPLES] > 0, (number, b)


def test_fully_async_rollout_pool_is_accounted_by_the_rollouter(fully_async_run):
    spans = load_spans(fully_async_run.out / "traces.jsonl")
    windows = [s for s in spans if s.name == sc.SPAN_ROLLOUTER_GENERATE]
    assert windows
    for w in windows:  # each parameter-version window: generating, or blocked by the staleness limit
        gpus = w.attributes[sc.ATTR_GOODPUT_GPUS]
        parts = (
            w.attributes[sc.bucket_attr(sc.BUCKET_GENERATING)]
            + w.attributes[sc.bucket_attr(sc.BUCKET_STALENESS_BLOCKED)]
        )
        assert parts == pytest.approx(gpus * w.seconds, rel=0.01, abs=0.01), w.attributes
    rows = fully_async_run.prom.query(f"sum by (pool, bucket) ({sc.GPU_SECONDS.name})")
    got = {(r["metric"][sc.LABEL_POOL], r["metric"][sc.LABEL_BUCKET]): float(r["value"][1]) for r in rows}
    assert got[(sc.POOL_ROLLOUT, sc.BUCKET_GENERATING)] > 0, got
    assert got[(sc.POOL_TRAIN, sc.BUCKET_WAITING_FOR_SAMPLES)] > 0, got
    assert not any(pool == sc.POOL_COLOCATED for pool, _ in got), got


def test_separate_async_accounts_the_standalone_rollout_pool_apart(separate_async_run):
    training = _training(separate_async_run)
    _adds_up(training)
    for tree in training.values():
        assert tree.root.attributes[sc.ATTR_GOODPUT_GPUS] == 2  # the hybrid pool's device and the standalone one
    pools = separate_async_run.prom.scalar_by(f"sum by (pool) ({sc.GPU_SECONDS.name})", sc.LABEL_POOL)
    assert set(pools) == {sc.POOL_COLOCATED, sc.POOL_ROLLOUT}, pools
    assert pools[sc.POOL_COLOCATED] == pytest.approx(pools[sc.POOL_ROLLOUT], rel=0.01)  # one device each


def test_top_showed_the_last_steps_split(v1_run):
    """`top --once` frames taken while the v1 run ran (conftest's TopProbe): once a step had ended, the split of
    its GPU time by bucket, largest first, with its goodput."""
    frames = [out for rc, out in v1_run.extra["top"].frames if rc == 0]
    lines = [ln for f in frames for ln in f.splitlines() if ln.startswith("GPU time, last step")]
    assert lines, frames[-1] if frames else "no frame"
    # the goodput ahead of the buckets: a frame's width (160) cuts the line's end, once "(goodput" itself
    assert re.match(r"GPU time, last step \(goodput \d+%\): ", lines[-1]), lines[-1]
    shares = re.findall(r"([a-z_]+) (\d+)%", lines[-1].split(": ", 1)[1])  # a share the width cut is no match
    assert {b for b, _ in shares} <= set(sc.BUCKETS) and sc.BUCKET_UPDATE_ACTOR in dict(shares), lines[-1]
    cut = len(lines[-1]) >= WIDTH - 4  # the frame's margin
    assert sum(int(p) for _, p in shares) <= 101 and (cut or sum(int(p) for _, p in shares) >= 95), lines[-1]
    assert [int(p) for _, p in shares] == sorted((int(p) for _, p in shares), reverse=True)
