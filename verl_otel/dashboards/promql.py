"""PromQL pieces the alert rules share: the label sets a run's series are grouped by, a verl training key's
series, a key against its own median."""

from __future__ import annotations

from verl_otel import semconv as sc

BY = f"{sc.LABEL_PROJECT}, {sc.LABEL_EXPERIMENT}, instance"
RUN = f"{sc.LABEL_PROJECT}, {sc.LABEL_EXPERIMENT}"  # a restarted trainer gets a new instance, not a new run


def training(key: str) -> str:
    """The series of verl's logged scalar ``key`` (a regex of keys when it has regex characters)."""
    op = "=~" if any(c in key for c in "|*+?()[") else "="  # verl's keys have none of these
    return f'{sc.TRAINING_METRIC.name}{{{sc.LABEL_KEY}{op}"{key}"}}'


def spike(key: str, factor: float) -> str:
    """``key`` (a regex of keys) above ``factor`` times its own 1h median, series by series."""
    return f"{training(key)} > {factor:g} * quantile_over_time(0.5, {training(key)}[1h])"
