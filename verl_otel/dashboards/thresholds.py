"""Every alert threshold with its default and its documentation (deploy/README.md's table is generated from
it); ``--threshold name=value`` overrides one (``python -m verl_otel.dashboards.build``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any


def duration_seconds(window: str) -> float:
    """A Prometheus duration such as 10m or 1h30m, in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", window)
    if not parts or "".join(n + u for n, u in parts) != window:
        raise ValueError(f"not a Prometheus duration: {window!r}")
    return sum(int(n) * units[u] for n, u in parts)


def _t(default: float | str, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class Thresholds:
    """Every alert threshold, with its default (documented in deploy/README.md; override with --threshold)."""

    step_stall_factor: float = _t(3.0, "VerlStepStalled: no new step for this many mean step times ...")
    step_stall_min_s: float = _t(600.0, "... and at least this many seconds")
    phase_hung_factor: float = _t(
        5.0, "VerlPhaseHung: the running phase's elapsed time above this many times its mean duration ..."
    )
    phase_hung_min_s: float = _t(900.0, "... and at least this many seconds")
    phase_hung_for: str = _t("1m", "... for this long")
    phase_first_max_s: float = _t(
        7200.0,
        "VerlPhaseHungFirstRun: a phase with no finished run yet in this "
        "process (the first step, or after a restart) active longer than this",
    )
    stall_for: str = _t(
        "1m", "VerlStall: a process has reported a stall (verl_stall_active, see VERL_OTEL_STALL_*) for this long"
    )
    rollout_stall_window: str = _t(
        "10m", "VerlRolloutStalled: no sample finished in this window (of an older rollout) while samples are in flight"
    )
    score_zero_window: str = _t("1h", "VerlScoreStuckAtZero: critic/score/mean exactly 0 over this window ...")
    score_zero_min_steps: float = _t(10.0, "... once the run is past this step")
    grad_norm_factor: float = _t(
        10.0, "VerlGradNormSpike: actor/ or critic/grad_norm above this many times its 1h median"
    )
    kl_max: float = _t(0.05, "VerlKLBlowUp: actor/ppo_kl or actor/kl_loss above this for 5m (healthy 1e-3..1e-2)")
    kl_min: float = _t(
        0.001,
        "VerlKLTooSmallRewardFlat: every KL verl logs (ppo_kl, kl_loss, reward_kl_penalty) "
        "below this on average over reward_flat_window ...",
    )
    reward_flat_window: str = _t("30m", "... while the mean score of this window ...")
    reward_flat_min_gain: float = _t(0.01, "... rose less than this over the window before")
    entropy_min: float = _t(0.05, "VerlEntropyCollapse: actor/entropy below this for 10m (healthy 0.4-0.6 early)")
    entropy_band_low: float = _t(0.4, "VerlEntropyOutOfBand: the 30m mean of actor/entropy below this ...")
    entropy_band_high: float = _t(0.6, "... or above this (the guides' healthy band)")
    reward_spread_min: float = _t(
        0.01,
        "VerlRewardSpreadCollapsed: critic/score/max - min below this over 30m past "
        "score_zero_min_steps (the reward's std is at most half of it)",
    )
    clipfrac_max: float = _t(
        0.8, "VerlClipFractionNearOne: the 15m mean of actor/pg_clipfrac above this (healthy < 0.2)"
    )
    vf_loss_factor: float = _t(10.0, "VerlValueLossBlowUp: critic/vf_loss above this many times its 1h median")
    memory_fraction: float = _t(0.95, "VerlGPUMemoryNearLimit: DCGM used/total above this, or ...")
    gpu_memory_gb: float = _t(
        80.0,
        "... verl's [actor/]perf/max_memory_reserved_gb above memory_fraction x the "
        "smallest GPU DCGM reports, or x this (GiB) without DCGM",
    )
    step_regression_factor: float = _t(
        1.5, "VerlStepTimeRegression: 15m mean of timing_s/step above this many times its 6h median"
    )
    run_gone_window: str = _t(
        "1h", "VerlRunGone: a run that reported within this window and vanished short of its planned steps"
    )
    pipeline_window: str = _t(
        "5m",
        "Collector rules: failures, queue drops or refusals within this window; "
        "VerlRunGone and VerlStepStalled keep quiet while the Collector refused data in it",
    )
    dropped_window: str = _t(
        "10m", "VerlTelemetryDropped: verl-otel lost data (export_failed, queue_full, key_cap) within this window"
    )
    engine_kv_cache_max: float = _t(
        0.95, "VerlEngineKVCacheSaturated: vLLM's KV-cache usage above this share while requests wait, for 5m"
    )
    engine_preemption_window: str = _t(
        "10m",
        "VerlEnginePreemptionsClimbing: vLLM preempted more than "
        "engine_preemptions_max requests within this window ...",
    )
    engine_preemptions_max: float = _t(10.0, "... (per rollout replica)")
    engine_no_tokens_window: str = _t(
        "1m", "VerlEngineNoTokens: a rollout replica with requests running generated no token within this window ..."
    )
    engine_no_tokens_for: str = _t("1m", "... for this long")
    straggler_ratio: float = _t(
        1.3, "VerlStragglingRank: a rank's last worker call above this many times the median rank's ..."
    )
    straggler_for: str = _t("15m", "... for this long (several steps: each step's call refreshes it)")
    leak_mib_per_hour: float = _t(
        256.0, "VerlMemoryLeak: a process' resident memory growing faster than this (MiB per hour) ..."
    )
    leak_window: str = _t("1h", "... over this window, in both of its halves, for 15m")
    idle_share_min: float = _t(
        0.2, "VerlIdleShareGrowing: the run's idle share of GPU time (verl_gpu_seconds_total) above this ..."
    )
    idle_growth_factor: float = _t(1.25, "... and above this many times its share over the window before ...")
    idle_growth_window: str = _t("1h", "... each window this long, the one before also above the one before it")
    tool_failure_share: float = _t(0.5, "VerlToolFailing: a tool's failed calls above this share of its calls ...")
    tool_failure_window: str = _t("10m", "... within this window ...")
    tool_failure_min_calls: float = _t(10.0, "... of at least this many calls")
    tool_failure_for: str = _t("2m", "... for this long")
    tool_p99_factor: float = _t(5.0, "VerlToolSlow: a tool's p99 call time above this many times its p99 ...")
    tool_p99_window: str = _t("15m", "... (p99 now: over this window) ...")
    tool_p99_history: str = _t("6h", "... over this window before it ...")
    tool_p99_min_s: float = _t(5.0, "... and above this many seconds")

    @classmethod
    def with_overrides(cls, pairs: list[str]) -> Thresholds:
        known = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for pair in pairs:
            name, _, raw = pair.partition("=")
            if name not in known:
                raise ValueError(f"unknown threshold {name!r}; known: {', '.join(known)}")
            values[name] = raw if known[name] in ("str", str) else float(raw)
        out = cls(**values)
        for f in fields(out):
            if f.type in ("str", str):
                duration_seconds(getattr(out, f.name))  # fail here, not later in promtool
        return out


#: the defaults, the committed rules' thresholds
DEFAULTS = Thresholds()
