"""Rank step traces and name the phase that made each slow: the phase whose duration deviates most
from its own median across the window ("update_actor 3.4× its median")."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis.jaeger import rfc3339, trace_link
from verl_otel.analysis.model import Sample, StepTrace

#: A phase median below max(NEAR_ZERO_FLOOR_S, NEAR_ZERO_OF_STEP x median step) is "~0": a ratio
#: against it is noise (adv at 3 ms vs 12 ms is "4×" and means nothing).
NEAR_ZERO_FLOOR_S = 0.005
NEAR_ZERO_OF_STEP = 0.01
#: Below this ratio no phase "stands out": the step is slow everywhere, or not slow at all.
STANDS_OUT = 1.1
#: A phase that usually takes ~0 s (it does not run every step: checkpoint, validation) is named
#: when it takes at least this share of the step.
NOTABLE_OF_STEP = 0.05
SAMPLES_SHOWN = 3
TIMES = "\u00d7"


@dataclass(frozen=True)
class Cause:
    phase: str
    seconds: float
    median_s: float

    @property
    def ratio(self) -> float:
        return self.seconds / self.median_s

    @property
    def excess_s(self) -> float:
        return self.seconds - self.median_s

    @property
    def stands_out(self) -> bool:
        return self.ratio >= STANDS_OUT


@dataclass
class Verdict:
    step: StepTrace
    cause: Cause | None  # the phase with the largest ratio to its median, if any has a usable median
    note: str | None  # why there is no cause (or why it says little)
    unusual: list[tuple[str, float]] = field(default_factory=list)  # ~0-median phases that took time here
    ratios: dict[str, float] = field(default_factory=dict)


@dataclass
class Ranking:
    verdicts: list[Verdict]
    steps_compared: int
    medians: dict[str, float]
    near_zero_s: float


def training_steps(steps: list[StepTrace]) -> list[StepTrace]:
    """Steps to compare: step 0 is the validation before training, not a training step."""
    return [s for s in steps if s.global_step != 0]


def phase_medians(steps: list[StepTrace]) -> dict[str, float]:
    """Median seconds of each phase over all the steps; a step without the phase counts as 0 s, so a
    phase that runs every 10th step has a ~0 median rather than looking normal when it runs."""
    names = {p for s in steps for p in s.phases}
    return {p: statistics.median([s.phases.get(p, 0.0) for s in steps]) for p in names}


def near_zero_s(steps: list[StepTrace]) -> float:
    typical = statistics.median([s.seconds for s in steps]) if steps else 0.0
    return max(NEAR_ZERO_FLOOR_S, NEAR_ZERO_OF_STEP * typical)


def explain(step: StepTrace, medians: dict[str, float], near_zero: float, compared: int) -> Verdict:
    """The phase of ``step`` that deviates most from its median: largest ratio; ratios equal at the
    precision shown (0.1) are tied, and the larger excess in seconds wins."""
    best: Cause | None = None
    ratios: dict[str, float] = {}
    unusual: list[tuple[str, float]] = []
    for phase, seconds in step.phases.items():
        med = medians.get(phase, 0.0)
        if med < near_zero:
            if seconds >= max(near_zero, NOTABLE_OF_STEP * step.seconds):
                unusual.append((phase, seconds))
            continue
        cand = Cause(phase, seconds, med)
        ratios[phase] = cand.ratio
        if best is None or (round(cand.ratio, 1), cand.excess_s) > (round(best.ratio, 1), best.excess_s):
            best = cand
    unusual.sort(key=lambda x: -x[1])
    note = None
    if not step.phases:
        note = "the step has no phase spans"
    elif best is None:
        note = f"every phase's median is ~0 s (under {near_zero:.3g}s): no ratio to speak of"
    elif compared < 3:
        note = f"only {compared} step{'s' * (compared != 1)} in the window to compare with"
    return Verdict(step, best, note, unusual, ratios)


def rank(steps: list[StepTrace], top: int) -> Ranking:
    """The ``top`` slowest steps, each explained against the medians of all steps given."""
    compared = training_steps(steps)
    medians = phase_medians(compared)
    nz = near_zero_s(compared)
    slowest = sorted(compared, key=lambda s: s.seconds, reverse=True)[: max(0, top)]
    return Ranking([explain(s, medians, nz, len(compared)) for s in slowest], len(compared), medians, nz)


# -- rendering --------------------------------------------------------------------------------
def _r(x: float, nd: int = 3) -> float:
    return round(x, nd)


def to_json(ranking: Ranking, ui_base: str) -> list[dict[str, Any]]:
    out = []
    for i, v in enumerate(ranking.verdicts, 1):
        st = v.step
        out.append({
            "rank": i,
            "global_step": st.global_step,
            "trace_id": st.trace_id,
            "start": rfc3339(st.start_ns),
            "duration_s": _r(st.seconds),
            "error": st.error,
            "phases": {p: _r(s) for p, s in sorted(st.phases.items(), key=lambda kv: -kv[1])},
            "phase_runs": dict(st.phase_runs),
            "phase_ratios": {p: _r(r, 2) for p, r in v.ratios.items()},
            "cause": None if v.cause is None else {
                "phase": v.cause.phase, "ratio_to_median": _r(v.cause.ratio, 2), "duration_s": _r(v.cause.seconds),
                "median_s": _r(v.cause.median_s), "excess_s": _r(v.cause.excess_s),
                "stands_out": v.cause.stands_out},
            "note": v.note,
            "summary": cause_text(v),
            "usually_near_zero": [{"phase": p, "duration_s": _r(s)} for p, s in v.unusual],
            "slowest_samples": [{"index": s.index, "rollout_n": s.rollout_n, "duration_s": _r(s.seconds),
                                 "worker": s.worker, "mode": s.mode, "error": s.error}
                                for s in st.samples[:SAMPLES_SHOWN]],
            "link": trace_link(ui_base, st.trace_id),
        })
    return out


def cause_text(v: Verdict) -> str:
    """One line: the deviating phase, else a usually-absent phase that ran, else why none is named."""
    c = v.cause
    if c is not None and c.stands_out:
        text = f"{c.phase} {c.ratio:.1f}{TIMES} its median ({c.seconds:.2f}s vs {c.median_s:.2f}s, +{c.excess_s:.2f}s)"
    elif v.unusual:
        phase, sec = v.unusual[0]
        text = f"{phase} {sec:.2f}s, a phase that usually takes ~0 s (it does not run every step)"
    elif c is not None:
        text = f"no phase stands out (the largest is {c.phase} {c.ratio:.2f}{TIMES} its median)"
    else:
        text = "none to name"
    return f"{text}; {v.note}" if v.note else text


def sample_text(s: Sample) -> str:
    where = [f"n={s.rollout_n}"] if s.rollout_n is not None else []
    where += [f"worker {s.worker}"] if s.worker is not None else []
    where += [s.mode] if s.mode not in (None, sc.MODE_TRAIN) else []
    return (("#?" if s.index is None else f"#{s.index}") + f" {s.seconds:.2f}s"
            + (f" ({', '.join(where)})" if where else "") + (" ERROR" if s.error else ""))


def to_text(ranking: Ranking, ui_base: str) -> str:
    lines = []
    for i, v in enumerate(ranking.verdicts, 1):
        st = v.step
        number = "?" if st.global_step is None else st.global_step
        lines.append(f"#{i} step {number}  {st.seconds:.2f}s{'  ERROR' if st.error else ''}  "
                     f"{trace_link(ui_base, st.trace_id)}")
        lines.append(f"   cause: {cause_text(v)}")
        named = v.cause is None or not v.cause.stands_out  # cause_text named the first one already
        for phase, sec in v.unusual[1 if named else 0:]:
            lines.append(f"   also:  {phase} {sec:.2f}s, a phase that usually takes ~0 s (it does not run every step)")
        parts = []
        for phase, sec in sorted(st.phases.items(), key=lambda kv: -kv[1]):
            ratio = f" ({v.ratios[phase]:.1f}{TIMES})" if phase in v.ratios else ""
            runs = st.phase_runs.get(phase, 1)
            parts.append(f"{phase} {sec:.2f}s{ratio}" + (f" in {runs} runs" if runs > 1 else ""))
        lines.append("   phases: " + (", ".join(parts) or "none"))
        if st.samples:
            lines.append("   slowest samples: " + ", ".join(map(sample_text, st.samples[:SAMPLES_SHOWN])))
    return "\n".join(lines)
