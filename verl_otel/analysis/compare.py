"""One run against another (``verl-otel compare``): per phase, the median time and time per 1k tokens in
each, the ratio OTHER/BASELINE with a bootstrap confidence interval from the steps, the phases that changed
beyond noise first; then what differed between the runs (verl version, trainer, the step spans' config
values, samples, tokens)."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis.step_traces import StepTrace

#: Resamples of each run's per-step values, and the seed that makes the interval the same on every call.
RESAMPLES = 2000
SEED = 0
CONFIDENCE = 0.95
#: A phase "changed" when its interval excludes 1 and its ratio moved by at least this much either way,
MIN_CHANGE = 0.10
#: and its median by at least this many seconds: the interval sees the steps of one run each, not how a run as a whole
#: drifts with the host's load; identical runs of the CPU demo (v1, 3 steps, 7 runs) moved short phases' medians by
#: up to 44 ms (ref 105-149 ms, adv 20-32 ms, update_weights 13-30 ms), naming one in 9 of 30 pairs without this
MIN_MOVE_S = 0.05
#: Medians under this in both runs are ~0 s: a ratio between two such times is noise.
NEAR_ZERO_S = 0.005
#: Step span attributes that vary step to step by nature (not a run's configuration).
_PER_STEP = frozenset(
    (
        sc.ATTR_GLOBAL_STEP,
        sc.ATTR_EPOCH,
        sc.ATTR_PHASE_SLOWEST,
        sc.ATTR_STEP_STALLS,
        sc.ATTR_STEP_PROMPT_TOKENS,
        sc.ATTR_STEP_RESPONSE_TOKENS,
        sc.ATTR_STOPPED,
        sc.ATTR_STEP_GPU_SECONDS,
        *sc.STEP_METRIC_ATTRS.values(),
    )
)


def _per_step(key: str) -> bool:
    """What a step measured (its goodput buckets' GPU-seconds, ratio and busy shares included), not how the run
    was set up: left out of the config, as a bucket that is 0 in every step of one run is no setting."""
    return key in _PER_STEP or (key.startswith(sc.ATTR_GOODPUT_PREFIX) and key != sc.ATTR_GOODPUT_GPUS)


@dataclass(frozen=True)
class RunSummary:
    source: str
    steps: int  # training steps compared
    apart: list[int | None]  # steps not compared: step 0 (the validation before training), validation-only steps
    samples: int | None  # training samples over the compared steps (None: no rollout.worker span says)
    tokens: int | None  # the steps' prompt + response tokens (None: the step spans carry none)
    config: dict[str, Any]  # step span attributes constant over the run's steps
    varying: frozenset[str] = frozenset()  # step span attributes (not per-step by nature) that changed mid-run


@dataclass(frozen=True)
class PhaseChange:
    phase: str
    base_s: float  # median seconds over the steps it ran in
    other_s: float
    base_steps: int  # steps it ran in
    other_steps: int
    base_per_1k: float | None  # median seconds per 1k tokens (phase spans carrying verl.phase.tokens)
    other_per_1k: float | None
    ratio: float | None  # other_s / base_s (None: ~0 s in the baseline)
    low: float | None  # the bootstrap interval of the ratio (None: under 2 steps in a run, or ~0 s)
    high: float | None

    @property
    def per_1k_ratio(self) -> float | None:
        if self.base_per_1k and self.other_per_1k is not None:
            return self.other_per_1k / self.base_per_1k
        return None

    @property
    def changed(self) -> bool:
        """Beyond noise: the interval excludes 1, the ratio moved by at least MIN_CHANGE and the median by at
        least MIN_MOVE_S."""
        if self.ratio is None or self.low is None or self.high is None:
            return False
        if abs(self.other_s - self.base_s) < MIN_MOVE_S:
            return False
        outside = self.low > 1.0 or self.high < 1.0
        return outside and abs(self.ratio - 1.0) >= MIN_CHANGE


@dataclass
class Comparison:
    base: RunSummary
    other: RunSummary
    phases: list[PhaseChange]  # in both runs: changed first (largest move first), then the rest by time
    only_base: list[str] = field(default_factory=list)  # phases that ran in the baseline only
    only_other: list[str] = field(default_factory=list)
    differences: list[tuple[str, Any, Any]] = field(default_factory=list)  # (attribute, baseline, other); None: unset

    @property
    def changed(self) -> list[PhaseChange]:
        return [p for p in self.phases if p.changed]


#: What a difference says of an attribute that changed within a run.
VARIES = "(varies within the run)"


def _config_value(run: RunSummary, key: str) -> Any:
    return VARIES if key in run.varying else run.config.get(key)


def compared_steps(steps: list[StepTrace]) -> tuple[list[StepTrace], list[StepTrace]]:
    """(training steps, steps listed apart): step 0 is the validation before training; a step whose only
    phase is a validation (or that has none) trained nothing."""
    train: list[StepTrace] = []
    apart: list[StepTrace] = []
    for s in steps:
        trained = any(p != sc.PHASE_VALIDATE for p in s.phases)
        (train if s.global_step != 0 and trained else apart).append(s)
    return train, apart


def bootstrap_ratio(base: list[float], other: list[float], seed: int = SEED) -> tuple[float, float] | None:
    """The CONFIDENCE interval of median(other) / median(base): each run's per-step values resampled with
    replacement RESAMPLES times (percentile bootstrap, seeded). None under 2 values a side."""
    if len(base) < 2 or len(other) < 2:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(RESAMPLES):
        b = statistics.median(rng.choices(base, k=len(base)))
        o = statistics.median(rng.choices(other, k=len(other)))
        if b > 0:
            ratios.append(o / b)
    if len(ratios) < RESAMPLES // 2:
        return None
    ratios.sort()
    tail = (1.0 - CONFIDENCE) / 2
    return ratios[int(tail * (len(ratios) - 1))], ratios[int((1.0 - tail) * (len(ratios) - 1))]


def _per_1k(steps: list[StepTrace], phase: str) -> float | None:
    vals = [1000.0 * s.phases[phase] / s.tokens[phase] for s in steps if phase in s.phases and s.tokens.get(phase)]
    return statistics.median(vals) if vals else None


def phase_change(phase: str, base: list[StepTrace], other: list[StepTrace]) -> PhaseChange:
    b = [s.phases[phase] for s in base if phase in s.phases]
    o = [s.phases[phase] for s in other if phase in s.phases]
    bm, om = statistics.median(b), statistics.median(o)
    ratio = om / bm if bm >= NEAR_ZERO_S or (bm > 0 and om >= NEAR_ZERO_S) else None
    ci = bootstrap_ratio(b, o) if ratio is not None else None
    return PhaseChange(
        phase, bm, om, len(b), len(o), _per_1k(base, phase), _per_1k(other, phase), ratio, *(ci or (None, None))
    )


def run_config(steps: list[StepTrace]) -> tuple[dict[str, Any], frozenset[str]]:
    """The step span attributes that hold one value over all the steps (the run's trainer, mode, verl
    version, rollout n, batch size, ...), without those that vary step to step by nature; and the names
    of those that changed mid-run."""
    out: dict[str, Any] = {}
    varying = set()
    for key in sorted(k for k in {k for s in steps for k in s.attributes} if not _per_step(k)):
        vals = [s.attributes.get(key) for s in steps]
        if all(v == vals[0] for v in vals):
            out[key] = vals[0]
        else:
            varying.add(key)
    return out, frozenset(varying)


def summarize(source: str, steps: list[StepTrace]) -> tuple[RunSummary, list[StepTrace]]:
    train, apart = compared_steps(steps)
    samples = sum(s.sample_count for s in train)
    tokens = 0
    for s in train:
        for key in (sc.ATTR_STEP_PROMPT_TOKENS, sc.ATTR_STEP_RESPONSE_TOKENS):
            v = s.attributes.get(key)
            tokens += int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0
    config, varying = run_config(train)
    summary = RunSummary(
        source, len(train), [s.global_step for s in apart], samples or None, tokens or None, config, varying
    )
    return summary, train


def compare(base_source: str, base: list[StepTrace], other_source: str, other: list[StepTrace]) -> Comparison:
    bsum, btrain = summarize(base_source, base)
    osum, otrain = summarize(other_source, other)
    bphases = {p for s in btrain for p in s.phases}
    ophases = {p for s in otrain for p in s.phases}
    changes = [phase_change(p, btrain, otrain) for p in bphases & ophases]
    changes.sort(key=lambda c: (not c.changed, -abs(c.other_s - c.base_s) if c.changed else -c.base_s, c.phase))
    diffs = []
    for key in sorted(set(bsum.config) | set(osum.config) | bsum.varying | osum.varying):
        bv, ov = _config_value(bsum, key), _config_value(osum, key)
        if bv != ov or bv == VARIES:
            diffs.append((key, bv, ov))
    return Comparison(bsum, osum, changes, sorted(bphases - ophases), sorted(ophases - bphases), diffs)


# -- rendering --------------------------------------------------------------------------------
TIMES = "\u00d7"


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _run_json(run: RunSummary) -> dict[str, Any]:
    return {
        "source": run.source,
        "steps": run.steps,
        "steps_apart": run.apart,
        "samples": run.samples,
        "tokens": run.tokens,
        "config": run.config,
    }


def to_json(c: Comparison) -> dict[str, Any]:
    return {
        "baseline": _run_json(c.base),
        "other": _run_json(c.other),
        "interval": {
            "confidence": CONFIDENCE,
            "resamples": RESAMPLES,
            "seed": SEED,
            "min_change": MIN_CHANGE,
            "min_move_s": MIN_MOVE_S,
        },
        "changed": [p.phase for p in c.changed],
        "phases": [
            {
                "phase": p.phase,
                "baseline_s": _r(p.base_s),
                "other_s": _r(p.other_s),
                "baseline_steps": p.base_steps,
                "other_steps": p.other_steps,
                "baseline_s_per_1k_tokens": _r(p.base_per_1k, 4),
                "other_s_per_1k_tokens": _r(p.other_per_1k, 4),
                "ratio": _r(p.ratio),
                "ci_low": _r(p.low),
                "ci_high": _r(p.high),
                "per_1k_tokens_ratio": _r(p.per_1k_ratio),
                "changed": p.changed,
            }
            for p in c.phases
        ],
        "only_baseline": c.only_base,
        "only_other": c.only_other,
        "differences": [{"attribute": k, "baseline": b, "other": o} for k, b, o in c.differences],
    }


def _phase_line(p: PhaseChange) -> str:
    if p.ratio is None:
        ratio = "~0 s"
    elif p.low is None or p.high is None:
        ratio = f"{p.ratio:.2f}{TIMES} (too few steps for an interval)"
    else:
        ratio = f"{p.ratio:.2f}{TIMES} [{p.low:.2f}-{p.high:.2f}]"
    line = f"  {p.phase:<22} {p.base_s:8.3f}s -> {p.other_s:8.3f}s  {ratio}"
    if p.base_per_1k is not None or p.other_per_1k is not None:
        line += f"  per 1k tokens {_secs(p.base_per_1k)} -> {_secs(p.other_per_1k)}"
    if p.base_steps != p.other_steps:
        line += f"  (ran in {p.base_steps} vs {p.other_steps} steps)"
    return line


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}s"


def _fmt(v: Any) -> str:
    return "(unset)" if v is None else str(v)


def _run_line(name: str, run: RunSummary) -> str:
    apart = ""
    if run.apart:
        numbers = ", ".join("?" if n is None else str(n) for n in run.apart)
        apart = f"; step{'s' * (len(run.apart) != 1)} {numbers} listed apart: validation only"
    return f"{name}: {run.source} ({run.steps} training step{'s' * (run.steps != 1)}{apart})"


def to_text(c: Comparison) -> str:
    pct = int(CONFIDENCE * 100)
    moved = f"moved >= {MIN_CHANGE:.0%} and >= {MIN_MOVE_S:g}s"
    lines = [_run_line("baseline", c.base), _run_line("other   ", c.other), ""]
    changed = c.changed
    if changed:
        lines.append(f"changed beyond noise (OTHER/BASELINE median, {pct}% interval excludes 1, {moved}):")
        lines.extend(map(_phase_line, changed))
    else:
        lines.append(f"no phase changed beyond noise ({pct}% interval excluding 1, {moved})")
    rest = [p for p in c.phases if not p.changed]
    if rest:
        lines.append("within noise:")
        lines.extend(map(_phase_line, rest))
    if c.only_base:
        lines.append("only in the baseline: " + ", ".join(c.only_base))
    if c.only_other:
        lines.append("only in the other run: " + ", ".join(c.only_other))
    lines.append("")
    diffs = [f"  {k}: {_fmt(b)} -> {_fmt(o)}" for k, b, o in c.differences]
    for what, b, o in (("samples", c.base.samples, c.other.samples), ("tokens", c.base.tokens, c.other.tokens)):
        if b is not None or o is not None:
            diffs.append(f"  {what}: {_fmt(b)} -> {_fmt(o)}" + ("" if b != o else " (same)"))
    lines.append("what differed between the runs (step span attributes; samples and tokens over the compared steps):")
    lines.extend(diffs or ["  nothing the step spans say"])
    return "\n".join(lines)
