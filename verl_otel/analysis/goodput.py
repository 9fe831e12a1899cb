"""Reading goodput back (semconv/goodput.py): each step span's GPU-seconds per bucket, a run's totals, its worst
steps, which bucket grew in a slow step, and what would give back the most time, each advice tied to a bucket;
where the GPUs were measured (NVML), each bucket's measured busy share, and advice for a busy bucket whose GPUs
were mostly waiting."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis.step_traces import StepTrace, as_float

#: a bucket's words in sentences
WORDS: dict[str, str] = {
    sc.BUCKET_GENERATING: "generating",
    sc.BUCKET_LONG_TAIL: "waiting for the long tail",
    sc.BUCKET_OLD_LOG_PROB: "old log-probs",
    sc.BUCKET_REF: "reference log-probs",
    sc.BUCKET_VALUES: "critic values",
    sc.BUCKET_UPDATE_ACTOR: "actor update",
    sc.BUCKET_UPDATE_CRITIC: "critic update",
    sc.BUCKET_WEIGHT_SYNC: "weight sync",
    sc.BUCKET_VALIDATION: "validation",
    sc.BUCKET_CHECKPOINT: "checkpoint",
    sc.BUCKET_IDLE: "idle between phases",
    sc.BUCKET_WAITING_FOR_SAMPLES: "trainer waiting for samples",
    sc.BUCKET_STALENESS_BLOCKED: "rollout blocked by the staleness limit",
}

#: the buckets worth advice (the lost time), and what gives it back
ADVICE: dict[str, str] = {
    sc.BUCKET_LONG_TAIL: "partial rollout (an async trainer mode), more replicas, or a shorter max response length",
    sc.BUCKET_IDLE: "the driver's own work between phases: reward on the CPU (more reward workers, a reward "
    "model on the GPUs), advantages, data loading (dataloader workers)",
    sc.BUCKET_WAITING_FOR_SAMPLES: "more rollout GPUs, or a higher staleness threshold",
    sc.BUCKET_STALENESS_BLOCKED: "a higher staleness threshold, or a faster trainer",
    sc.BUCKET_WEIGHT_SYNC: "fewer weight syncs (parameter_sync_step) or a faster checkpoint engine",
    sc.BUCKET_VALIDATION: "validate less often (trainer.test_freq) or on fewer prompts",
    sc.BUCKET_CHECKPOINT: "save less often (trainer.save_freq) or asynchronously",
}
ADVICE_MIN_SHARE = 0.05  # a bucket below this share of the GPU time gets no advice
#: the useful buckets whose GPUs, measured below LOW_BUSY, were mostly waiting inside them, and what helps
LOW_BUSY_ADVICE: dict[str, str] = {
    sc.BUCKET_GENERATING: "more samples in flight per replica (a larger batch, max_num_seqs) or fewer rollout GPUs",
    sc.BUCKET_OLD_LOG_PROB: "larger micro-batches (log_prob_micro_batch_size_per_gpu) or use_dynamic_bsz",
    sc.BUCKET_REF: "larger micro-batches (log_prob_micro_batch_size_per_gpu) or use_dynamic_bsz",
    sc.BUCKET_VALUES: "larger micro-batches (ppo_micro_batch_size_per_gpu) or use_dynamic_bsz",
    sc.BUCKET_UPDATE_ACTOR: "larger micro-batches (ppo_micro_batch_size_per_gpu), use_dynamic_bsz, or less offload",
    sc.BUCKET_UPDATE_CRITIC: "larger micro-batches (ppo_micro_batch_size_per_gpu), use_dynamic_bsz, or less offload",
}
LOW_BUSY = 0.5  # a useful bucket measured busy less than this share of its GPU time gets advice


@dataclass
class StepSplit:
    step: int
    gpu_seconds: float
    buckets: dict[str, float]
    trace_id: str = ""
    busy: dict[str, float] = field(default_factory=dict)  # bucket -> measured busy share, where measured

    def share(self, bucket: str) -> float:
        return self.buckets.get(bucket, 0.0) / self.gpu_seconds if self.gpu_seconds > 0 else 0.0

    @property
    def ratio(self) -> float:
        return sum(self.share(b) for b in sc.GOOD_BUCKETS)


def of_attributes(attrs: Mapping[str, Any], step: int, trace_id: str = "") -> StepSplit | None:
    """A step span's split, from its attributes (None: the span carries none)."""
    total = as_float(attrs.get(sc.ATTR_STEP_GPU_SECONDS))
    if total is None:
        return None
    buckets = {b: as_float(attrs.get(sc.bucket_attr(b))) or 0.0 for b in sc.BUCKETS}
    busy = {b: v for b in sc.BUSY_BUCKETS if (v := as_float(attrs.get(sc.busy_attr(b)))) is not None}
    return StepSplit(step, total, buckets, trace_id, busy)


def of_steps(steps: Iterable[StepTrace]) -> list[StepSplit]:
    """The training steps' splits, by step number (the validation before training, step 0, is no step)."""
    out = []
    for s in steps:
        if s.global_step is None or s.global_step <= 0:
            continue
        split = of_attributes(s.attributes, s.global_step, s.trace_id)
        if split is not None:
            out.append(split)
    return sorted(out, key=lambda s: s.step)


@dataclass
class Summary:
    steps: list[StepSplit]
    totals: dict[str, float] = field(default_factory=dict)
    gpu_seconds: float = 0.0

    @property
    def ratio(self) -> float:
        good = sum(v for k, v in self.totals.items() if k in sc.GOOD_BUCKETS)
        return good / self.gpu_seconds if self.gpu_seconds > 0 else 0.0

    def share(self, bucket: str) -> float:
        return self.totals.get(bucket, 0.0) / self.gpu_seconds if self.gpu_seconds > 0 else 0.0

    def busy(self) -> dict[str, float]:
        """Bucket -> its measured busy share over the run: each measured step's weighted by the bucket's GPU-seconds
        in it (steps where it was not measured left out; a bucket never measured is absent)."""
        sums: dict[str, tuple[float, float]] = {}
        for s in self.steps:
            for bucket, share in s.busy.items():
                weight = s.buckets.get(bucket, 0.0)
                if weight > 0:
                    busy, secs = sums.get(bucket, (0.0, 0.0))
                    sums[bucket] = (busy + share * weight, secs + weight)
        return {b: busy / secs for b, (busy, secs) in sums.items()}

    def low_busy(self) -> list[tuple[str, float, float, str]]:
        """(bucket, share of the GPU time, measured busy share, what helps) for each useful bucket at
        ADVICE_MIN_SHARE or more whose GPUs were measured busy less than LOW_BUSY, largest first."""
        busy = self.busy()
        rows = [
            (b, self.share(b), busy[b], text)
            for b, text in LOW_BUSY_ADVICE.items()
            if b in busy and busy[b] < LOW_BUSY and self.share(b) >= ADVICE_MIN_SHARE
        ]
        return sorted(rows, key=lambda r: -r[1])

    def worst(self, n: int = 3) -> list[StepSplit]:
        """The steps with the lowest goodput ratio."""
        return sorted(self.steps, key=lambda s: (s.ratio, -s.gpu_seconds))[:n]

    def advice(self) -> list[tuple[str, float, str]]:
        """(bucket, share, what gives it back) for each lost bucket at ADVICE_MIN_SHARE or more, largest first."""
        rows = [(b, self.share(b), text) for b, text in ADVICE.items() if self.share(b) >= ADVICE_MIN_SHARE]
        return sorted(rows, key=lambda r: -r[1])


def summarize(steps: list[StepSplit], totals: Mapping[str, float] | None = None) -> Summary:
    """The run's summary of ``steps`` (or, from Prometheus, of its ``totals`` alone)."""
    if totals is None:
        sums = dict.fromkeys(sc.BUCKETS, 0.0)
        for s in steps:
            for b, v in s.buckets.items():
                sums[b] = sums.get(b, 0.0) + v
        gpu = sum(s.gpu_seconds for s in steps)
    else:
        sums = {b: float(totals.get(b, 0.0)) for b in sc.BUCKETS}
        gpu = sum(sums.values())
    return Summary(steps, sums, gpu)


def grew(step: StepSplit, others: list[StepSplit]) -> tuple[str, float, float] | None:
    """The bucket that grew most in ``step`` against its median over ``others`` (GPU-seconds): (bucket, its share
    of the step's GPU time, times its median); None when none grew. Only lost time and the training phases count:
    the largest absolute growth over the median wins."""
    best: tuple[float, str, float] | None = None
    for bucket in sc.BUCKETS:
        mine = step.buckets.get(bucket, 0.0)
        median = statistics.median([o.buckets.get(bucket, 0.0) for o in others]) if others else 0.0
        growth = mine - median
        if growth > 0 and (best is None or growth > best[0]):
            best = (growth, bucket, mine / median if median > 0 else float("inf"))
    if best is None:
        return None
    return best[1], step.share(best[1]), best[2]


def grew_words(bucket: str, share: float, times: float) -> str:
    """``waiting for the long tail 41% of GPU time, 3.0\u00d7 its median``."""
    ratio = "none in the median step" if times == float("inf") else f"{times:.1f}\u00d7 its median"
    return f"{WORDS[bucket]} {share:.0%} of GPU time, {ratio}"


def grew_text(step: StepSplit, others: list[StepSplit]) -> str | None:
    """:func:`grew_words` of the bucket that grew most in ``step`` (None: nothing grew)."""
    found = grew(step, others)
    return None if found is None else grew_words(*found)


def _step_json(s: StepSplit) -> dict[str, Any]:
    row = {"step": s.step, "gpu_seconds": s.gpu_seconds, "buckets": s.buckets, "goodput_ratio": round(s.ratio, 6)}
    if s.busy:
        row["busy_share"] = dict(s.busy)
    return row


def to_json(summary: Summary, worst: int = 3) -> dict[str, Any]:
    """The run's totals, ``steps`` and advice; ``busy_share`` (bucket -> measured busy share) beside ``buckets``
    only where measured: absent, not 0, without NVML readings."""
    busy = summary.busy()
    measured = {b: {"busy_share": round(v, 4)} for b, v in busy.items()}
    advice = [
        {"bucket": b, "share": round(share, 6), "advice": text} | measured.get(b, {})
        for b, share, text in summary.advice()
    ]
    advice += [
        {"bucket": b, "share": round(share, 6), "busy_share": round(measured, 4), "advice": text}
        for b, share, measured, text in summary.low_busy()
    ]
    out: dict[str, Any] = {
        "gpu_seconds": round(summary.gpu_seconds, 6),
        "gpu_hours": round(summary.gpu_seconds / 3600, 6),
        "goodput_ratio": round(summary.ratio, 6),
        "buckets": {b: round(v, 6) for b, v in summary.totals.items()},
        "steps": [_step_json(s) for s in summary.steps],
        "worst_steps": [s.step for s in summary.worst(worst)],
        "advice": advice,
    }
    if busy:
        out["busy_share"] = {b: round(v, 4) for b, v in busy.items()}
    return out


def to_text(summary: Summary, worst: int = 3) -> str:
    busy = summary.busy()
    lines = [
        f"GPU time: {summary.gpu_seconds / 3600:.4g} GPU-hours ({summary.gpu_seconds:.1f} GPU-s) over "
        f"{len(summary.steps) or 'all'} steps; goodput {summary.ratio:.0%}",
        "",
        f"{'bucket':<40} {'GPU-hours':>10} {'share':>6}" + (" measured busy" if busy else ""),
    ]
    for bucket, value in sorted(summary.totals.items(), key=lambda kv: -kv[1]):
        if value > 0:
            measured = f" {busy[bucket]:>13.0%}" if bucket in busy else ""
            lines.append(f"{WORDS[bucket]:<40} {value / 3600:>10.4g} {summary.share(bucket):>6.1%}{measured}")
    bad = summary.worst(worst)
    if bad:
        lines += ["", "worst steps (lowest goodput):"]
        for s in bad:
            others = [o for o in summary.steps if o.step != s.step]
            why = grew_text(s, others)
            lines.append(f"  step {s.step}: goodput {s.ratio:.0%}" + (f"; {why}" if why else ""))
    advice = summary.advice()
    lines += ["", "what would give back the most time:" if advice else "no lost bucket above 5% of GPU time"]
    for bucket, share, text in advice:
        lines.append(f"  {WORDS[bucket]} cost {share:.0%} of GPU time: {text}")
    low = summary.low_busy()
    if low:
        lines += ["", f"useful buckets whose GPUs were measured busy less than {LOW_BUSY:.0%} of their time:"]
    for bucket, share, got, text in low:
        lines.append(f"  {bucket}: {got:.0%} of its GPU time measured busy ({share:.0%} of GPU time in it): {text}")
    if not busy:
        lines += ["", "no measured busy share (NVML readings of the GPUs): the buckets are time, not utilization"]
    return "\n".join(lines)
