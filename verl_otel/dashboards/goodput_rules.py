"""Goodput's alert (semconv/goodput.py): a run whose idle share of GPU time keeps growing, window after window (the
driver's own work between phases taking a larger part of each step: a reward that slows down, data loading that
falls behind), read from ``verl_gpu_seconds_total``."""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.dashboards.promql import RUN
from verl_otel.dashboards.rule import Rule
from verl_otel.dashboards.thresholds import Thresholds, duration_seconds


def idle_share(window: str, offset: str = "") -> str:
    """The idle bucket's share of the run's GPU time over ``window`` (ending ``offset`` ago)."""
    at = f" offset {offset}" if offset else ""
    gpu = sc.GPU_SECONDS.name
    idle = f'{gpu}{{{sc.LABEL_BUCKET}="{sc.BUCKET_IDLE}"}}'
    return f"(sum by ({RUN}) (increase({idle}[{window}]{at})) / sum by ({RUN}) (increase({gpu}[{window}]{at})))"


def goodput_rules(t: Thresholds) -> list[Rule]:
    w = t.idle_growth_window
    now, before, earlier = idle_share(w), idle_share(w, w), idle_share(w, f"{2 * _minutes(w)}m")
    return [
        Rule(
            "VerlIdleShareGrowing",
            f"{now} > {t.idle_share_min:g} and {now} > {t.idle_growth_factor:g} * {before} and {before} > {earlier}",
            "15m",
            "warning",
            "verl run {{ $labels.verl_experiment }}: the GPUs' idle share keeps growing",
            f"The share of GPU time idle between phases (the driver's own work: reward on the CPU, advantages, data "
            f"loading) is above {t.idle_share_min:.0%} over the last {w}, more than {t.idle_growth_factor:g}x the "
            f"{w} before, which grew over the {w} before that. `verl-otel goodput` shows where the GPU hours go and "
            "what gives them back; the panel 'GPU time by bucket' shows when it started.",
        ),
    ]


def _minutes(duration: str) -> int:
    return int(duration_seconds(duration) // 60)
