"""Rank step traces and name the phase that made each slow: the phase whose duration deviates most
from its own median across the window ("update_actor 3.4× its median")."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from verl_otel.analysis.jaeger import trace_link
from verl_otel.analysis.model import StepTrace

MIN_MEDIAN_S = 0.05  # a phase that usually takes ~0 s says nothing as a ratio


@dataclass
class Verdict:
    step: StepTrace
    phase: str | None
    ratio: float | None
    median_s: float | None
    medians: dict[str, float]


def phase_medians(steps: list[StepTrace]) -> dict[str, float]:
    names = {p for s in steps for p in s.phases}
    return {p: statistics.median([s.phases[p] for s in steps if p in s.phases]) for p in names}


def deviating_phase(step: StepTrace, medians: dict[str, float]) -> tuple[str | None, float | None]:
    best: tuple[float, float, str] | None = None
    for phase, seconds in step.phases.items():
        med = medians.get(phase, 0.0)
        if med < MIN_MEDIAN_S:
            continue
        key = (seconds / med, seconds - med, phase)
        if best is None or key[:2] > best[:2]:
            best = key
    return (best[2], best[0]) if best else (None, None)


def rank(steps: list[StepTrace], top: int) -> list[Verdict]:
    training = [s for s in steps if s.global_step > 0]  # step 0 is the validation before training
    medians = phase_medians(training)
    out = []
    for step in sorted(training, key=lambda s: s.seconds, reverse=True)[:top]:
        phase, ratio = deviating_phase(step, medians)
        out.append(Verdict(step, phase, ratio, medians.get(phase) if phase else None, medians))
    return out


def to_json(verdicts: list[Verdict], ui_base: str) -> list[dict[str, Any]]:
    return [{
        "global_step": v.step.global_step,
        "trace_id": v.step.trace_id,
        "duration_s": round(v.step.seconds, 3),
        "error": v.step.error,
        "phases": {p: round(s, 3) for p, s in sorted(v.step.phases.items(), key=lambda kv: -kv[1])},
        "cause": None if v.phase is None else {"phase": v.phase, "ratio_to_median": round(v.ratio or 0, 2),
                                               "median_s": round(v.median_s or 0, 3)},
        "slowest_samples": [{"index": s.index, "duration_s": round(s.seconds, 3), "worker": s.worker}
                            for s in v.step.samples[:3]],
        "link": trace_link(ui_base, v.step.trace_id),
    } for v in verdicts]


def to_text(verdicts: list[Verdict], ui_base: str) -> str:
    lines = []
    for i, v in enumerate(verdicts, 1):
        st = v.step
        lines.append(f"#{i} step {st.global_step}  {st.seconds:.2f}s{'  ERROR' if st.error else ''}  "
                     f"{trace_link(ui_base, st.trace_id)}")
        if v.phase is not None:
            lines.append(f"   cause: {v.phase} {v.ratio:.1f}\u00d7 its median ({st.phases[v.phase]:.2f}s vs "
                         f"{v.median_s:.2f}s)")
        else:
            lines.append("   cause: no phase stands out (too few steps, or all phases near 0 s)")
        parts = []
        for phase, sec in sorted(st.phases.items(), key=lambda kv: -kv[1]):
            med = v.medians.get(phase, 0.0)
            ratio = f" ({sec / med:.1f}\u00d7)" if med >= 0.05 else ""
            runs = st.phase_runs.get(phase, 1)
            parts.append(f"{phase} {sec:.2f}s{ratio}" + (f" x{runs}" if runs > 1 else ""))
        lines.append("   phases: " + ", ".join(parts))
        if st.samples:
            lines.append("   slowest samples: " + ", ".join(
                f"#{s.index} {s.seconds:.2f}s" + (f" (worker {s.worker})" if s.worker is not None else "")
                for s in st.samples[:3]))
    return "\n".join(lines)
