"""The progress dashboard's goodput row (semconv/goodput.py): GPU time by bucket, stacked, per pool, and the
goodput ratio of each step."""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.dashboards.grafana import Panel, Row, Target, m

GPU_TIME = Panel(
    "GPU time by bucket",
    "What the GPUs were doing, stacked: GPU-seconds per second of finished steps by bucket (generating, waiting "
    "for the long tail, training by phase, weight sync, validation, checkpoint, idle between phases; async: the "
    "trainer waiting for samples), each pool (colocated, train, rollout) on its own. The stack's height is the "
    "pool's GPUs. `verl-otel goodput` says what would give time back. Healthy: generating and training dominate; "
    "idle and long tail thin and flat.",
    "timeseries",
    (
        Target(
            f"sum by ({sc.LABEL_POOL}, {sc.LABEL_BUCKET}) (rate({m(sc.GPU_SECONDS.name)}[$__rate_interval]))",
            "{{pool}} {{bucket}}",
        ),
    ),
    unit="short",
    stacked=True,
)
GOODPUT = Panel(
    "Goodput per step",
    "The last finished step's share of GPU time spent generating or training (the rest: the long tail, weight "
    "sync, validation, checkpoint, idle, waiting). The VerlIdleShareGrowing alert fires when the idle share keeps "
    "growing. Healthy: steady, high.",
    "timeseries",
    (Target(f"max({m(sc.GOODPUT_RATIO.name)})", "goodput"),),
    unit="percentunit",
    max=1.0,
)

#: the progress dashboard's goodput row
ROWS = (Row(8, GPU_TIME, GOODPUT),)
