"""Goodput: what a step's GPU time was spent on (issue 36). One vocabulary for the step span's attributes, the
metrics, the dashboards' stacked panel, the alert and the ``goodput`` command.

A step's GPU time is, per resource pool, the pool's GPUs x the step's wall time (on the CPU demo a pool's "GPUs" are
its configured devices: ``n_gpus_per_node x nnodes``). It is split into buckets that add up to it: every instant of
the step belongs to one bucket per pool, read from the innermost trainer phase open then (telemetry/goodput.py).
"""

from __future__ import annotations

from typing import Final

from verl_otel.semconv.metric_def import MetricDef
from verl_otel.semconv.spans import (
    PHASE_OLD_LOG_PROB,
    PHASE_PARAM_SYNC,
    PHASE_REF,
    PHASE_ROLLOUT,
    PHASE_SAVE_CHECKPOINT,
    PHASE_UPDATE_ACTOR,
    PHASE_UPDATE_CRITIC,
    PHASE_UPDATE_WEIGHTS,
    PHASE_VALIDATE,
    PHASE_VALUES,
)

# --------------------------------------------------------------------------------------------
# The buckets (lower_snake, GPU-seconds)
# --------------------------------------------------------------------------------------------
BUCKET_GENERATING: Final = "generating"
BUCKET_LONG_TAIL: Final = "long_tail"
BUCKET_OLD_LOG_PROB: Final = "old_log_prob"
BUCKET_REF: Final = "ref"
BUCKET_VALUES: Final = "values"
BUCKET_UPDATE_ACTOR: Final = "update_actor"
BUCKET_UPDATE_CRITIC: Final = "update_critic"
BUCKET_WEIGHT_SYNC: Final = "weight_sync"
BUCKET_VALIDATION: Final = "validation"
BUCKET_CHECKPOINT: Final = "checkpoint"
BUCKET_IDLE: Final = "idle"
BUCKET_WAITING_FOR_SAMPLES: Final = "waiting_for_samples"
BUCKET_STALENESS_BLOCKED: Final = "staleness_blocked"

#: every bucket, in the order the views stack them, with what it means
BUCKETS: Final[dict[str, str]] = {
    BUCKET_GENERATING: "rollout GPUs generating: the rollout phase's time weighted by the replicas' requests in "
    "flight against their peak in that rollout (a full batch is busy, one straggler of 64 is 1/64 busy)",
    BUCKET_LONG_TAIL: "rollout GPUs waiting for the long tail: the rest of the rollout phase (replicas idle or "
    "nearly so while the last samples finish, or a replica that got no request)",
    BUCKET_OLD_LOG_PROB: "training compute: the old policy's log-probs",
    BUCKET_REF: "training compute: the reference policy's log-probs",
    BUCKET_VALUES: "training compute: the critic's values",
    BUCKET_UPDATE_ACTOR: "training compute: the actor update",
    BUCKET_UPDATE_CRITIC: "training compute: the critic update",
    BUCKET_WEIGHT_SYNC: "the weight sync to the rollout (update_weights; fully_async: param_sync)",
    BUCKET_VALIDATION: "the validation inside the step",
    BUCKET_CHECKPOINT: "the checkpoint save",
    BUCKET_IDLE: "idle between phases: the driver's own work (advantages, reward on the CPU, data loading), or a "
    "standalone pool whose side has nothing to do",
    BUCKET_WAITING_FOR_SAMPLES: "a standalone training pool starved: the trainer waits for the rollout's samples",
    BUCKET_STALENESS_BLOCKED: "fully_async's rollout pool blocked by the staleness limit (the rollouter paused)",
}

#: buckets that are the GPUs' useful work (the goodput ratio's numerator)
GOOD_BUCKETS: Final[frozenset[str]] = frozenset(
    (
        BUCKET_GENERATING,
        BUCKET_OLD_LOG_PROB,
        BUCKET_REF,
        BUCKET_VALUES,
        BUCKET_UPDATE_ACTOR,
        BUCKET_UPDATE_CRITIC,
    )
)

#: buckets whose GPUs' measured busy share (NVML, where GPUs exist) the step span carries: the training compute, asked
#: of the worker group that ran the phase, and the rollout (generating and long_tail share the rollout phase's one
#: reading: a GPU's sampler does not know when the tail began), asked of the rollout replicas' processes
BUSY_BUCKETS: Final[frozenset[str]] = frozenset(
    (
        BUCKET_GENERATING,
        BUCKET_LONG_TAIL,
        BUCKET_OLD_LOG_PROB,
        BUCKET_REF,
        BUCKET_VALUES,
        BUCKET_UPDATE_ACTOR,
        BUCKET_UPDATE_CRITIC,
    )
)

#: trainer phase -> its bucket on a pool that does that work (the rollout phase is split, see BUCKETS)
PHASE_BUCKETS: Final[dict[str, str]] = {
    PHASE_ROLLOUT: BUCKET_GENERATING,
    PHASE_OLD_LOG_PROB: BUCKET_OLD_LOG_PROB,
    PHASE_REF: BUCKET_REF,
    PHASE_VALUES: BUCKET_VALUES,
    PHASE_UPDATE_ACTOR: BUCKET_UPDATE_ACTOR,
    PHASE_UPDATE_CRITIC: BUCKET_UPDATE_CRITIC,
    PHASE_UPDATE_WEIGHTS: BUCKET_WEIGHT_SYNC,
    PHASE_PARAM_SYNC: BUCKET_WEIGHT_SYNC,
    PHASE_VALIDATE: BUCKET_VALIDATION,
    PHASE_SAVE_CHECKPOINT: BUCKET_CHECKPOINT,
}

# --------------------------------------------------------------------------------------------
# Pools (the ``pool`` label)
# --------------------------------------------------------------------------------------------
POOL_COLOCATED: Final = "colocated"  # training and rollout share the GPUs (verl's hybrid engine)
POOL_TRAIN: Final = "train"  # a standalone training pool (separate / fully_async modes)
POOL_ROLLOUT: Final = "rollout"  # a standalone rollout pool
POOLS: Final = (POOL_COLOCATED, POOL_TRAIN, POOL_ROLLOUT)
LABEL_POOL: Final = "pool"
LABEL_BUCKET: Final = "bucket"

# --------------------------------------------------------------------------------------------
# The step span's attributes
# --------------------------------------------------------------------------------------------
ATTR_STEP_GPU_SECONDS: Final = "verl.step.gpu_seconds"  # float: every pool's GPUs x the step's wall time
ATTR_GOODPUT_PREFIX: Final = "verl.goodput."  # + bucket: float GPU-seconds of the step (all pools)
ATTR_GOODPUT_RATIO: Final = "verl.goodput.ratio"  # float: GOOD_BUCKETS' share of the step's GPU time
ATTR_GOODPUT_GPUS: Final = "verl.goodput.gpus"  # int: the GPUs accounted (every pool's)
ATTR_GOODPUT_TAIL_MEASURED: Final = "verl.goodput.tail_measured"  # bool: rollout occupancy came from the workers
#: + bucket: float 0-1, the mean NVML utilization of the GPUs of the processes that did the bucket's phase, over
#: that phase (BUSY_BUCKETS; absent where not measured: no GPU, no nvidia-ml-py, or the answer not in at step end)
ATTR_GOODPUT_BUSY_PREFIX: Final = "verl.goodput.busy_share."

# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------
GPU_SECONDS: Final = MetricDef(
    "verl_gpu_seconds_total",
    "counter",
    "GPU-seconds of finished steps by resource pool and bucket (what the GPUs were doing; semconv/goodput.py).",
    (LABEL_POOL, LABEL_BUCKET),
    unit="s",
)
GOODPUT_RATIO: Final = MetricDef(
    "verl_step_goodput_ratio",
    "gauge",
    "The last finished step's goodput: generating and training compute over the step's GPU time (0-1).",
    unit="1",
)
STEP_GPU_SECONDS: Final = MetricDef(
    "verl_step_gpu_seconds",
    "gauge",
    "The last finished step's GPU-seconds by bucket, every pool's together (what `top` shows).",
    (LABEL_BUCKET,),
    unit="s",
)
GOODPUT_METRICS: Final[tuple[MetricDef, ...]] = (GPU_SECONDS, GOODPUT_RATIO, STEP_GPU_SECONDS)


def bucket_attr(bucket: str) -> str:
    """The step span's attribute of ``bucket``."""
    return ATTR_GOODPUT_PREFIX + bucket


def busy_attr(bucket: str) -> str:
    """The step span's attribute of ``bucket``'s measured busy share."""
    return ATTR_GOODPUT_BUSY_PREFIX + bucket
