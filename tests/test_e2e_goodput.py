"""Where the GPU hours go (issue 36) on the shared real runs (conftest.py): every training step's span carries its
GPU time and buckets that add up to it within 1%; the legacy run's planted long tail (``rollout_sample@3=6``)
grows the long-tail bucket in step 3, named by ``slow-steps`` and ``goodput``; the counters reach a real
Prometheus."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys

import pytest

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


def _tail_grows(training: dict) -> None:
    tails = {n: t.root.attributes[sc.bucket_attr(sc.BUCKET_LONG_TAIL)] for n, t in training.items()}
    others = [v for n, v in tails.items() if n != TAIL_STEP]
    assert all(t.root.attributes[sc.ATTR_GOODPUT_TAIL_MEASURED] for t in training.values())
    assert tails[TAIL_STEP] > 2 * statistics.median(others) + 0.5, tails


def test_legacy_buckets_add_up_and_the_planted_tail_grows(legacy_run):
    training = _training(legacy_run)
    _adds_up(training)
    _tail_grows(training)
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
