"""The training-progress dashboard's fully_async rows: the rollouter beside the trainer."""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.dashboards.grafana import (
    Panel,
    Row,
    Target,
    m,
)

_R = "$__rate_interval"


# -- fully_async: the rollouter beside the trainer ------------------------------------------------------
_ASYNC_ONLY = "fully_async only (`verl-otel demo --trainer fully_async`)"
ASYNC_VERSIONS = Panel(
    "Async rollout: parameter version and staleness",
    "Trainer and rollouter parameter versions, and the largest / mean staleness (versions behind) of the last "
    "batch the trainer took. Healthy: the versions move together and staleness stays at or below "
    "async_training.staleness_threshold.",
    "timeseries",
    (
        Target(f"max by (side) ({m(sc.ASYNC_PARAM_VERSION.name)})", "version {{side}}"),
        Target(f"max({m(sc.ASYNC_STALENESS.name)})", "staleness max"),
        Target(f"max({m(sc.ASYNC_STALENESS_MEAN.name)})", "staleness mean"),
    ),
    cpu_empty=_ASYNC_ONLY,
)
ASYNC_QUEUE = Panel(
    "Async rollout: MessageQueue depth",
    "Samples waiting between rollouter and trainer (as each side last saw it) against the queue's limit. "
    "Healthy: between the trainer's batch size and the limit; at the limit the rollouter pauses, near 0 the "
    "trainer waits.",
    "timeseries",
    (
        Target(f"max by (side) ({m(sc.ASYNC_QUEUE_DEPTH.name)})", "depth seen by {{side}}"),
        Target(f"max({m(sc.ASYNC_QUEUE_CAPACITY.name)})", "limit"),
    ),
    cpu_empty=_ASYNC_ONLY,
)
ASYNC_IDLE = Panel(
    "Async rollout: idle ratio",
    "Share of the current parameter-version window each side spent idle: the trainer waiting for samples, the "
    "rollouter paused; and whether the rollouter is paused now. Healthy: both low; a trainer near 1 is "
    "rollout-bound, a rollouter near 1 is held back by the staleness limit.",
    "timeseries",
    (
        Target(f"max by (side) ({m(sc.ASYNC_IDLE_RATIO.name)})", "idle {{side}}"),
        Target(f"max({m(sc.ASYNC_ROLLOUTER_PAUSED.name)})", "rollouter paused"),
    ),
    unit="percentunit",
    cpu_empty=_ASYNC_ONLY,
)
ASYNC_PRODUCED = Panel(
    "Async rollout: samples produced",
    "Samples per second the rollouter puts into the queue, samples dropped by a full queue, and samples being "
    "generated now. Healthy: a steady rate, no drops.",
    "timeseries",
    (
        Target(f"sum(rate({m(sc.ASYNC_SAMPLES_PRODUCED.name)}[{_R}]))", "produced/s"),
        Target(f"sum(rate({m(sc.ASYNC_SAMPLES_DROPPED.name)}[{_R}]))", "dropped/s"),
        Target(f"sum({m(sc.ASYNC_ROLLOUTER_INFLIGHT.name)})", "in flight", unit="none"),
    ),
    cpu_empty=_ASYNC_ONLY,
)

#: the progress dashboard's fully_async rows
ROWS = (Row(8, ASYNC_VERSIONS, ASYNC_QUEUE), Row(8, ASYNC_IDLE, ASYNC_PRODUCED))
