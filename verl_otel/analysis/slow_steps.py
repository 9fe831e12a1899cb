"""Rank step traces and name the phase that made each slow: the phase that added the most time over
what it usually takes ("update_actor 3.4x its median (+2.40 s)"). A phase that ran in only some of the
steps (validation, checkpoints, a weight sync every k steps) is extra work in the steps it ran in: all of
its time counts ("validate 2.10s, ran in 2 of 5 steps")."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis import captures as cap
from verl_otel.analysis import goodput as gp
from verl_otel.analysis import long_tail as lt
from verl_otel.analysis import stragglers as sg
from verl_otel.analysis import tokens as tk
from verl_otel.analysis import tools as tl
from verl_otel.analysis import weight_sync_time as wsync
from verl_otel.analysis.jaeger import rfc3339, trace_link
from verl_otel.analysis.step_traces import Sample, StepTrace

#: A phase median below max(NEAR_ZERO_FLOOR_S, NEAR_ZERO_OF_STEP x median step) is "~0": a ratio
#: against it is noise (adv at 3 ms vs 12 ms is "4x" and means nothing).
NEAR_ZERO_FLOOR_S = 0.005
NEAR_ZERO_OF_STEP = 0.01
#: Below this ratio a phase that runs every step does not "stand out": the step is slow everywhere,
#: or not slow at all.
STANDS_OUT = 1.1
#: A phase that does not run every step counts when it takes at least this share of the step.
NOTABLE_OF_STEP = 0.05
SAMPLES_SHOWN = 3
TIMES = "\u00d7"


@dataclass(frozen=True)
class Cause:
    phase: str
    seconds: float
    median_s: float  # over all compared steps, a step without the phase counting 0 s
    ran_in: int | None = None  # steps it ran in, when not all of them (its time is all extra)
    compared: int = 0

    @property
    def sometimes(self) -> bool:
        return self.ran_in is not None

    @property
    def ratio(self) -> float:
        return self.seconds / self.median_s if self.median_s > 0 else float("inf")

    @property
    def excess_s(self) -> float:
        return self.seconds if self.sometimes else self.seconds - self.median_s

    @property
    def stands_out(self) -> bool:
        return self.sometimes or self.ratio >= STANDS_OUT


@dataclass
class Verdict:
    step: StepTrace
    cause: Cause | None  # the phase that added the most time, if any stands out; else the largest ratio
    note: str | None  # why there is no cause (or why it says little)
    unusual: list[tuple[str, float]] = field(default_factory=list)  # other sometimes-phases that took time here
    ratios: dict[str, float] = field(default_factory=dict)
    tokens: tk.TokenView | None = None  # the cause's tokens against its medians, when its spans carry them
    per_token: dict[str, float] = field(default_factory=dict)  # phase -> per-token time / its median
    gpu_grew: tuple[str, float, float] | None = None  # the goodput bucket that grew most (analysis/goodput.py)


@dataclass
class Ranking:
    verdicts: list[Verdict]
    steps_compared: int
    medians: dict[str, float]
    near_zero_s: float
    ran_in: dict[str, int] = field(default_factory=dict)  # phase -> steps it ran in
    per_token: bool = False  # ranked by the largest per-token slowdown, not by duration


def training_steps(steps: list[StepTrace]) -> list[StepTrace]:
    """Steps to compare: step 0 is the validation before training, not a training step."""
    return [s for s in steps if s.global_step != 0]


def phase_medians(steps: list[StepTrace]) -> dict[str, float]:
    """Median seconds of each phase over all the steps; a step without the phase counts as 0 s, so a
    phase that runs every 10th step has a ~0 median rather than looking normal when it runs."""
    names = {p for s in steps for p in s.phases}
    return {p: statistics.median([s.phases.get(p, 0.0) for s in steps]) for p in names}


def phase_presence(steps: list[StepTrace]) -> dict[str, int]:
    """How many of the steps each phase ran in."""
    out: dict[str, int] = {}
    for s in steps:
        for p in s.phases:
            out[p] = out.get(p, 0) + 1
    return out


def near_zero_s(steps: list[StepTrace]) -> float:
    typical = statistics.median([s.seconds for s in steps]) if steps else 0.0
    return max(NEAR_ZERO_FLOOR_S, NEAR_ZERO_OF_STEP * typical)


def explain(
    step: StepTrace, medians: dict[str, float], near_zero: float, compared: int, ran_in: dict[str, int] | None = None
) -> Verdict:
    """The phase of ``step`` that added the most time: a phase that runs in every step against its
    median, one that ran in only some steps (``ran_in`` below ``compared``; without ``ran_in``: a ~0
    median) with all of its time, if notable. Ties at the precision shown go to the larger ratio."""
    ratios: dict[str, float] = {}
    candidates: list[Cause] = []
    for phase, seconds in step.phases.items():
        med = medians.get(phase, 0.0)
        runs = ran_in.get(phase, compared) if ran_in is not None else (0 if med < near_zero else compared)
        if runs < compared:
            if seconds >= max(near_zero, NOTABLE_OF_STEP * step.seconds):
                candidates.append(Cause(phase, seconds, med, runs, compared))
        elif med >= near_zero:
            cand = Cause(phase, seconds, med, None, compared)
            ratios[phase] = cand.ratio
            candidates.append(cand)
        elif med > 0 and seconds >= max(near_zero, NOTABLE_OF_STEP * step.seconds):
            # ~0 s in most steps, a notable share of this one (a slowed weight sync): the ratio is real here,
            # not the noise of two tiny times
            candidates.append(Cause(phase, seconds, med, None, compared))
    out = [c for c in candidates if c.stands_out]
    if out:
        best: Cause | None = max(out, key=lambda c: (round(c.excess_s, 2), c.ratio))
    else:  # nothing stands out: say which came closest
        best = max(candidates, key=lambda c: (round(c.ratio, 1), c.excess_s), default=None)
    unusual = sorted(((c.phase, c.seconds) for c in candidates if c.sometimes and c is not best), key=lambda x: -x[1])
    note = None
    if not step.phases:
        note = "the step has no phase spans"
    elif best is None:
        note = f"every phase's median is ~0 s (under {near_zero:.3g}s): no ratio to speak of"
    elif compared < 3:
        note = f"only {compared} step{'s' * (compared != 1)} in the window to compare with"
    return Verdict(step, best, note, unusual, ratios)


def rank(steps: list[StepTrace], top: int, per_token: bool = False) -> Ranking:
    """The ``top`` slowest steps, each explained against the medians of all steps given. ``per_token``: the
    ``top`` steps whose phase was slowest per token against its median (steps without token counts last)."""
    compared = training_steps(steps)
    medians = phase_medians(compared)
    ran_in = phase_presence(compared)
    nz = near_zero_s(compared)
    tmed = tk.token_medians(compared)
    per = {id(s): tk.per_token_ratios(s, tmed) for s in compared}
    if per_token:
        order = sorted(compared, key=lambda s: (max(per[id(s)].values(), default=0.0), s.seconds), reverse=True)
    else:
        order = sorted(compared, key=lambda s: s.seconds, reverse=True)
    splits = {s.step: s for s in gp.of_steps(compared)}
    verdicts = []
    for s in order[: max(0, top)]:
        v = explain(s, medians, nz, len(compared), ran_in)
        v.per_token = per[id(s)]
        if (mine := splits.get(s.global_step or 0)) is not None:
            v.gpu_grew = gp.grew(mine, [o for n, o in splits.items() if n != mine.step])
        if v.cause is not None and not v.cause.sometimes:
            v.tokens = tk.view(s, v.cause.phase, tmed)
        verdicts.append(v)
    return Ranking(verdicts, len(compared), medians, nz, ran_in, per_token)


# -- rendering --------------------------------------------------------------------------------
def _r(x: float, nd: int = 3) -> float:
    return round(x, nd)


def to_json(ranking: Ranking, ui_base: str | None) -> list[dict[str, Any]]:
    """``ui_base``: the Jaeger UI of the links (None: no Jaeger known, no links)."""
    out = []
    for i, v in enumerate(ranking.verdicts, 1):
        st = v.step
        out.append(
            {
                "rank": i,
                "global_step": st.global_step,
                "trace_id": st.trace_id,
                "start": rfc3339(st.start_ns),
                "duration_s": _r(st.seconds),
                "error": st.error,
                "phases": {p: _r(s) for p, s in sorted(st.phases.items(), key=lambda kv: -kv[1])},
                "phase_runs": dict(st.phase_runs),
                "phase_ratios": {p: _r(r, 2) for p, r in v.ratios.items()},
                "cause": None
                if v.cause is None
                else {
                    "phase": v.cause.phase,
                    "duration_s": _r(v.cause.seconds),
                    "median_s": _r(v.cause.median_s),
                    # a phase that ran in only some steps has no ratio: all of its time is extra
                    "ratio_to_median": None if v.cause.sometimes else _r(v.cause.ratio, 2),
                    "ran_in_steps": v.cause.ran_in,
                    "excess_s": _r(v.cause.excess_s),
                    "stands_out": v.cause.stands_out,
                    "tokens": None if v.tokens is None else v.tokens.tokens,
                    "token_ratio": None if v.tokens is None else _r(v.tokens.token_ratio, 2),
                    "per_token_ratio": None if v.tokens is None else _r(v.tokens.per_token_ratio, 2),
                    "explained_by_tokens": None if v.tokens is None else v.tokens.explained_by_tokens,
                },
                "phase_tokens": dict(st.tokens),
                "phase_per_token_ratios": {p: _r(r, 2) for p, r in v.per_token.items()},
                "note": v.note,
                "summary": cause_text(v),
                "rollout_tail": None if (t := lt.tail(st)) is None else t.to_json(),
                "stragglers": [x.to_json() for x in sg.stragglers(st)],
                "weight_sync": None if (w := wsync.slowest(st.weight_syncs)) is None else w.to_json(),
                "weight_receive": None if (r := wsync.slowest(st.weight_receives)) is None else r.to_json(),
                "gpu_grew": _gpu_grew_json(v),
                "also_not_every_step": [{"phase": p, "duration_s": _r(s)} for p, s in v.unusual],
                "clock_skew_s": _r(st.clock_skew_s),
                "clock_offsets": {h: _r(o) for h, o in sorted(st.clock_offsets.items())},
                "slowest_samples": [
                    {
                        "index": s.index,
                        "rollout_n": s.rollout_n,
                        "duration_s": _r(s.seconds),
                        "worker": s.worker,
                        "mode": s.mode,
                        "error": s.error,
                        "engine": _engine_json(s),
                    }
                    for s in st.samples[:SAMPLES_SHOWN]
                ],
                "link": trace_link(ui_base, st.trace_id) if ui_base else None,
                "tools": [f.to_json() for f in tl.figures(st.tool_calls)],  # of the spanned samples' calls
                "captures": [{"span": n, "file": f, "tool": t} for n, f, t in st.captures],
            }
        )
    return out


def _gpu_grew_json(v: Verdict) -> dict[str, Any] | None:
    if v.gpu_grew is None:
        return None
    bucket, share, times = v.gpu_grew
    return {"bucket": bucket, "share": _r(share), "ratio_to_median": None if times == float("inf") else _r(times, 2)}


def _engine_json(s: Sample) -> dict[str, Any] | None:
    e = s.engine
    if e is None:
        return None
    return {
        "requests": e.requests,
        "queue_s": _r(e.queue_s),
        "prefill_s": _r(e.prefill_s),
        "decode_s": _r(e.decode_s),
        "replica": e.replica,
    }


def _sometimes_text(phase: str, seconds: float, ran_in: int | None, compared: int) -> str:
    where = f"ran in {ran_in} of {compared} steps" if ran_in is not None and compared else "it does not run every step"
    return f"{phase} {seconds:.2f}s, a phase that does not run every step ({where})"


def _sync_cause(v: Verdict) -> wsync.SyncParts | None:
    """The step's slowest weight sync, when the weight sync is what made the step slow."""
    if v.cause is None or v.cause.phase not in sc.WEIGHT_SYNC_PHASES or not v.cause.stands_out:
        return None
    return wsync.slowest(v.step.weight_syncs)


def cause_text(v: Verdict) -> str:
    """One line: the phase that added the most time, else why none is named."""
    c = v.cause
    if c is not None and c.sometimes:
        text = _sometimes_text(c.phase, c.seconds, c.ran_in, c.compared)
    elif c is not None and c.stands_out:
        text = f"{c.phase} {c.ratio:.1f}{TIMES} its median ({c.seconds:.2f}s vs {c.median_s:.2f}s, +{c.excess_s:.2f}s)"
        sync = _sync_cause(v)
        if sync is not None:  # which part of the weight sync
            text += f": {sync.part[0]} {sync.part[1]:.2f}s of {sync.seconds:.2f}s"
        if v.tokens is not None:  # more tokens, or slower per token?
            text += f": {v.tokens.text()}" + (" (more tokens, not slower)" if v.tokens.explained_by_tokens else "")
    elif c is not None:
        text = f"no phase stands out (the largest is {c.phase} {c.ratio:.2f}{TIMES} its median)"
    else:
        text = "none to name"
    return f"{text}; {v.note}" if v.note else text


def sample_text(s: Sample) -> str:
    where = [f"n={s.rollout_n}"] if s.rollout_n is not None else []
    where += [f"worker {s.worker}"] if s.worker is not None else []
    where += [s.mode] if s.mode not in (None, sc.MODE_TRAIN) else []
    e = s.engine
    if e is not None:  # why it was slow, from the engine's own spans
        where.append(
            f"engine: queue {e.queue_s:.2f}s, prefill {e.prefill_s:.2f}s, decode {e.decode_s:.2f}s"
            + (f" in {e.requests} requests" if e.requests > 1 else "")
            + (f", replica {e.replica}" if e.replica is not None else "")
        )
    return (
        ("#?" if s.index is None else f"#{s.index}")
        + f" {s.seconds:.2f}s"
        + (f" ({', '.join(where)})" if where else "")
        + (" ERROR" if s.error else "")
    )


def _hottest(file: str, tool: str) -> list[str]:
    """A sampling profile's hottest frames, where its file is readable here (a user on a login node)."""
    if tool == sc.CAPTURE_TOOL_VERL_PROFILER:  # verl's chrome trace: Perfetto reads it
        return []
    try:
        got = cap.read(Path(file), top=3)
    except cap.CaptureError:
        return []
    return [f"            {h.share:6.1%}  {h.frame}" for h in got.innermost]


def to_text(ranking: Ranking, ui_base: str | None, tools: bool = False) -> str:
    lines = []
    for i, v in enumerate(ranking.verdicts, 1):
        st = v.step
        number = "?" if st.global_step is None else st.global_step
        link = f"  {trace_link(ui_base, st.trace_id)}" if ui_base else ""
        lines.append(f"#{i} step {number}  {st.seconds:.2f}s{'  ERROR' if st.error else ''}{link}")
        lines.append(f"   cause: {cause_text(v)}")
        for phase, sec in v.unusual:
            runs = ranking.ran_in.get(phase)
            lines.append(f"   also:  {_sometimes_text(phase, sec, runs, ranking.steps_compared)}")
        parts = []
        for phase, sec in sorted(st.phases.items(), key=lambda kv: -kv[1]):
            ratio = f" ({v.ratios[phase]:.1f}{TIMES})" if phase in v.ratios else ""
            runs = st.phase_runs.get(phase, 1)
            parts.append(f"{phase} {sec:.2f}s{ratio}" + (f" in {runs} runs" if runs > 1 else ""))
        lines.append("   phases: " + (", ".join(parts) or "none"))
        if v.gpu_grew is not None:
            lines.append(f"   GPU time grew: {gp.grew_words(*v.gpu_grew)}")
        t = lt.tail(st)
        if t is not None and t.is_long:
            lines.append(f"   {t.text()}")
        lines.extend(f"   {x.text()}" for x in sg.stragglers(st))
        if (sync := _sync_cause(v)) is not None:
            lines.append(f"   {sync.text()}")
            if (receive := wsync.slowest(st.weight_receives)) is not None:
                lines.append(f"   {receive.text()}")
        if ranking.per_token and v.per_token:
            worst = sorted(v.per_token.items(), key=lambda kv: -kv[1])
            lines.append("   per-token time vs median: " + ", ".join(f"{p} {r:.1f}{TIMES}" for p, r in worst))
        if st.samples:
            lines.append("   slowest samples: " + ", ".join(map(sample_text, st.samples[:SAMPLES_SHOWN])))
        if tools:  # the tool calls of the samples that got a span (the slowest)
            lines.extend(f"   {f.text()}" for f in tl.figures(st.tool_calls))
        for name, file, tool in st.captures:  # `verl-otel capture FILE`, or verl's profile in Perfetto
            lines.append(f"   capture: {file} ({tool}, in {name})")
            lines += _hottest(file, tool)
        if st.clock_offsets:
            hosts = ", ".join(f"{h} {o:+.3f}s" for h, o in sorted(st.clock_offsets.items()))
            lines.append(f"   clock skew: {hosts} against the step's host (times aligned, durations as measured)")
    return "\n".join(lines)
