"""Did one rank hold the phase up? Per phase and worker call, the slowest rank's time (its ``worker.*`` spans)
against the median rank's: a step's phase ends when its slowest rank does."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from verl_otel.analysis.step_traces import StepTrace

#: A rank straggles when it took this many times the median rank's time ...
STRAGGLER_RATIO = 1.2
#: ... and at least this many seconds more (milliseconds of jitter are no straggler).
STRAGGLER_MIN_S = 0.05
TIMES = "\u00d7"


@dataclass(frozen=True)
class Straggler:
    phase: str
    call: str  # the worker.* span name
    role: str
    rank: int
    seconds: float
    median_s: float
    ranks: int

    @property
    def ratio(self) -> float:
        return self.seconds / self.median_s if self.median_s > 0 else float("inf")

    def text(self) -> str:
        role = f" ({self.role})" if self.role else ""
        return (
            f"straggler: rank {self.rank} in {self.phase}{role} {self.ratio:.1f}{TIMES} the median rank "
            f"({self.seconds:.2f}s vs {self.median_s:.2f}s, {self.call} on {self.ranks} ranks)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "call": self.call,
            "role": self.role or None,
            "rank": self.rank,
            "duration_s": round(self.seconds, 3),
            "median_rank_s": round(self.median_s, 3),
            "ratio": round(self.ratio, 2),
            "ranks": self.ranks,
        }


def slowest_ranks(step: StepTrace) -> list[Straggler]:
    """Per phase and call with two or more ranks: its slowest rank against the median rank, slowest excess first."""
    out = []
    for (phase, call, role), ranks in step.rank_calls.items():
        if len(ranks) < 2:
            continue
        rank, seconds = max(ranks.items(), key=lambda kv: (kv[1], -kv[0]))
        out.append(Straggler(phase, call, role, rank, seconds, statistics.median(ranks.values()), len(ranks)))
    return sorted(out, key=lambda s: s.median_s - s.seconds)


def stragglers(step: StepTrace) -> list[Straggler]:
    """The ranks that held a phase up (see STRAGGLER_RATIO, STRAGGLER_MIN_S)."""
    return [s for s in slowest_ranks(step) if s.ratio >= STRAGGLER_RATIO and s.seconds - s.median_s >= STRAGGLER_MIN_S]
