"""Was the rollout one slow sample and a long wait? The slowest training sample of a step (its ``rollout.sample``
span: every worker exports its slowest) against the median sample (each ``rollout.worker`` span says its batch's
median), and the share of the rollout during which only that sample was still running."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis.step_traces import Sample, StepTrace
from verl_otel.analysis.tools import TOOL_BOUND_SHARE

#: A tail worth naming: the slowest sample is this many times the median one ...
LONG_TAIL_RATIO = 3.0
#: ... and took at least this share of the rollout.
LONG_TAIL_OF_ROLLOUT = 0.5


@dataclass(frozen=True)
class Tail:
    sample: Sample
    rollout_s: float
    median_s: float
    alone_s: float | None  # how long it ran after every other exported training sample had ended

    @property
    def ratio(self) -> float:
        return self.sample.seconds / self.median_s if self.median_s > 0 else float("inf")

    @property
    def waited_share(self) -> float | None:
        if self.alone_s is None or self.rollout_s <= 0:
            return None
        return min(1.0, self.alone_s / self.rollout_s)

    @property
    def is_long(self) -> bool:
        return self.ratio >= LONG_TAIL_RATIO and self.sample.seconds >= LONG_TAIL_OF_ROLLOUT * self.rollout_s

    def text(self) -> str:
        s = self.sample
        index = "#?" if s.index is None else f"#{s.index}"
        text = (
            f"long tail: sample {index} took {s.seconds:.1f} s of the {self.rollout_s:.1f} s rollout, "
            f"median sample {self.median_s:.1f} s"
        )
        if s.tools is not None and s.tools.total_s >= TOOL_BOUND_SHARE * s.seconds:  # held up by a tool: name it
            text = (
                f"long tail: {s.tools.text(index, s.seconds)} (the rollout {self.rollout_s:.1f} s, median sample "
                f"{self.median_s:.1f} s)"
            )
        share = self.waited_share
        return text + (f", {share:.0%} of the rollout waited for 1 sample" if share is not None else "")

    def to_json(self) -> dict[str, Any]:
        share = self.waited_share
        return {
            "sample_index": self.sample.index,
            "worker": self.sample.worker,
            "sample_s": round(self.sample.seconds, 3),
            "rollout_s": round(self.rollout_s, 3),
            "median_sample_s": round(self.median_s, 3),
            "tail_ratio": round(self.ratio, 2),
            "waited_share": None if share is None else round(share, 3),
            "long_tail": self.is_long,
            "slowest_tool": None if self.sample.tools is None else self.sample.tools.to_json(),
        }


def tail(step: StepTrace) -> Tail | None:
    """The step's slowest training sample against the median sample; None without samples, rollout or medians."""
    train = [s for s in step.samples if s.mode in (None, sc.MODE_TRAIN)]  # slowest first
    rollout_s = step.phases.get(sc.PHASE_ROLLOUT, 0.0)
    if not train or rollout_s <= 0 or not step.worker_medians:
        return None
    slowest = train[0]
    others = [s.end_ns for s in train[1:] if s.end_ns]
    alone = max(0.0, (slowest.end_ns - max(others)) / 1e9) if others and slowest.end_ns else None
    return Tail(slowest, rollout_s, statistics.median(step.worker_medians), alone)
