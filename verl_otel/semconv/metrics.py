"""Every metric verl-otel exports (name, kind, help, labels, unit), its labels and drop reasons, and the
metrics of other exporters that dashboards and alerts read."""

from __future__ import annotations

from typing import Final

from verl_otel.semconv.agent import AGENT_METRICS
from verl_otel.semconv.engine import VLLM_METRICS
from verl_otel.semconv.goodput import GOODPUT_METRICS
from verl_otel.semconv.metric_def import (
    LABEL_KEY,
    LABEL_MODE,
    LABEL_PHASE,
    LABEL_REASON,
    LABEL_ROLE,
    LABEL_ROLLOUT_WORKER,
    LABEL_SIDE,
    RENAMED_ASYNC_ROLE,
    RENAMED_WORKER,
    MetricDef,
)
from verl_otel.semconv.why import WHY_METRICS

# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------
MODE_TRAIN: Final = "train"
MODE_VALIDATE: Final = "validate"

#: Histogram buckets, seconds: one second to hours (a step takes minutes).
DURATION_BUCKETS_S: Final[tuple[float, ...]] = (
    1,
    2,
    5,
    10,
    20,
    30,
    60,
    120,
    300,
    600,
    1200,
    1800,
    3600,
    7200,
    14400,
)


_ROLLOUT_LABELS = (LABEL_ROLLOUT_WORKER, LABEL_MODE)

ROLLOUT_SAMPLES_COMPLETED = MetricDef(
    "verl_rollout_samples_completed",
    "gauge",
    "Samples (agent loops) finished so far in the current rollout of this agent-loop worker.",
    _ROLLOUT_LABELS,
    unit="{sample}",
    renamed=RENAMED_WORKER,
)
ROLLOUT_SAMPLES_EXPECTED = MetricDef(
    "verl_rollout_samples_expected",
    "gauge",
    "Samples this agent-loop worker was given in the current rollout.",
    _ROLLOUT_LABELS,
    unit="{sample}",
    renamed=RENAMED_WORKER,
)
ROLLOUT_SAMPLES_INFLIGHT = MetricDef(
    "verl_rollout_samples_inflight",
    "gauge",
    "Samples started and not yet finished on this agent-loop worker.",
    _ROLLOUT_LABELS,
    unit="{sample}",
    renamed=RENAMED_WORKER,
)
ROLLOUT_OLDEST_INFLIGHT = MetricDef(
    "verl_rollout_oldest_inflight_seconds",
    "gauge",
    "Age of the longest-running unfinished sample: a lost request keeps growing here.",
    _ROLLOUT_LABELS,
    unit="s",
    renamed=RENAMED_WORKER,
)
ROLLOUT_ELAPSED = MetricDef(
    "verl_rollout_elapsed_seconds",
    "gauge",
    "Seconds since the current rollout started on this worker.",
    _ROLLOUT_LABELS,
    unit="s",
    renamed=RENAMED_WORKER,
)
ROLLOUT_ETA = MetricDef(
    "verl_rollout_eta_seconds",
    "gauge",
    "Estimated seconds until this worker's rollout completes (elapsed/completed x remaining).",
    _ROLLOUT_LABELS,
    unit="s",
    renamed=RENAMED_WORKER,
)

TRAINING_STEP = MetricDef(
    "verl_training_step",
    "gauge",
    "Current trainer global step.",
    unit="{step}",
)
TRAINING_STEPS_PLANNED = MetricDef(
    "verl_training_steps_planned",
    "gauge",
    "Total global steps this run plans (trainer.total_training_steps).",
    unit="{step}",
)
TRAINING_LAST_STEP = MetricDef(
    "verl_training_last_step_timestamp_seconds",
    "gauge",
    "Unix time the last global step ended (step-stalled alerts compare it with the typical step time).",
    unit="s",
)
TRAINING_ETA = MetricDef(
    "verl_training_eta_seconds",
    "gauge",
    "Run ETA from the mean of recent step durations.",
    unit="s",
)
PHASE_ACTIVE = MetricDef(
    "verl_phase_active",
    "gauge",
    "1 while the phase runs, else 0.",
    (LABEL_PHASE,),
    unit="",
)
PHASE_ELAPSED = MetricDef(
    "verl_phase_elapsed_seconds",
    "gauge",
    "Live elapsed time of the running phase (the heartbeat: growing = running, frozen at 0 = idle).",
    (LABEL_PHASE,),
    unit="s",
)
STEP_DURATION = MetricDef(
    "verl_step_duration_seconds",
    "histogram",
    "Duration of each global step; exemplars carry the step's trace id.",
    unit="s",
    buckets=DURATION_BUCKETS_S,
)
PHASE_DURATION = MetricDef(
    "verl_phase_duration_seconds",
    "histogram",
    "Duration of each phase run; exemplars carry the step's trace id.",
    (LABEL_PHASE,),
    unit="s",
    buckets=DURATION_BUCKETS_S,
)

UPDATE_MINIBATCHES_COMPLETED = MetricDef(
    "verl_update_minibatches_completed",
    "gauge",
    "Optimizer mini-batches done in the current actor/critic update.",
    (LABEL_ROLE,),
    unit="{minibatch}",
)
UPDATE_MINIBATCHES_EXPECTED = MetricDef(
    "verl_update_minibatches_expected",
    "gauge",
    "Optimizer mini-batches the current actor/critic update will run (all PPO epochs).",
    (LABEL_ROLE,),
    unit="{minibatch}",
)
UPDATE_EPOCH = MetricDef(
    "verl_update_epoch",
    "gauge",
    "Current PPO epoch (1-based) of the update.",
    (LABEL_ROLE,),
    unit="{epoch}",
)
UPDATE_ETA = MetricDef(
    "verl_update_eta_seconds",
    "gauge",
    "Estimated seconds until the current update completes.",
    (LABEL_ROLE,),
    unit="s",
)

TRAINING_METRIC = MetricDef(
    "verl_training_metric",
    "gauge",
    "Every scalar verl logs per step, by verl's own key (e.g. critic/score/mean).",
    (LABEL_KEY,),
    unit="",
)
PHASE_PEAK_MEMORY = MetricDef(
    "verl_phase_peak_memory_bytes",
    "gauge",
    "Peak accelerator memory allocated during the last run of the phase (torch.cuda only).",
    (LABEL_PHASE, LABEL_ROLE),
    unit="By",
)

STALL_ACTIVE = MetricDef(
    "verl_stall_active",
    "gauge",
    "1 while a call of the phase is stalled in this process (elapsed past its stall threshold), else 0.",
    (LABEL_PHASE,),
    unit="",
)
STALLS_TOTAL = MetricDef(
    "verl_stalls_total",
    "counter",
    "Stalls detected in this process, by phase (evidence: verl-otel doctor).",
    (LABEL_PHASE,),
    unit="{stall}",
)
CAPTURES_TOTAL = MetricDef(
    "verl_captures_total",
    "counter",
    "Sampling profiles this process recorded of itself while a call was stalled, by phase (their files: "
    "verl-otel doctor; the dashboards' Captures annotation).",
    (LABEL_PHASE,),
    unit="{capture}",
)

OTEL_DROPPED = MetricDef(
    "verl_otel_dropped_total",
    "counter",
    "Telemetry items dropped (queue full, exporter failure, bad value, key cap), by reason.",
    (LABEL_REASON,),
    unit="{item}",
)

# Async trainers (fully_async). The side label says which process observed the value.
ASYNC_SAMPLES_PRODUCED = MetricDef(
    "verl_async_samples_produced_total",
    "counter",
    "Samples (prompt groups) the rollouter put into the MessageQueue since it started.",
    unit="{sample}",
)
ASYNC_SAMPLES_DROPPED = MetricDef(
    "verl_async_samples_dropped_total",
    "counter",
    "Samples the MessageQueue dropped because it was full.",
    unit="{sample}",
)
ASYNC_QUEUE_DEPTH = MetricDef(
    "verl_async_queue_depth",
    "gauge",
    "Samples waiting in the MessageQueue, as last seen by this process (rollouter: just before each of "
    "its puts; trainer: after each take).",
    (LABEL_SIDE,),
    unit="{sample}",
    renamed=RENAMED_ASYNC_ROLE,
)
ASYNC_QUEUE_CAPACITY = MetricDef(
    "verl_async_queue_capacity",
    "gauge",
    "MessageQueue size limit (max_queue_size).",
    unit="{sample}",
)
ASYNC_PARAM_VERSION = MetricDef(
    "verl_async_param_version",
    "gauge",
    "Parameter version: the trainer's current_param_version, or the version the rollouter generates with.",
    (LABEL_SIDE,),
    unit="{version}",
    renamed=RENAMED_ASYNC_ROLE,
)
ASYNC_STALENESS = MetricDef(
    "verl_async_staleness",
    "gauge",
    "Largest staleness (trainer version minus generating version) in the last batch the trainer took.",
    unit="{version}",
)
ASYNC_STALENESS_MEAN = MetricDef(
    "verl_async_staleness_mean",
    "gauge",
    "Mean staleness over the samples of the last batch the trainer took.",
    unit="{version}",
)
ASYNC_IDLE_RATIO = MetricDef(
    "verl_async_idle_ratio",
    "gauge",
    "Live share of the current parameter-version window spent idle: the trainer waiting for samples, "
    "the rollouter paused (verl's own fully_async/<role>/idle_ratio, evaluated now).",
    (LABEL_SIDE,),
    unit="1",
    renamed=RENAMED_ASYNC_ROLE,
)
ASYNC_ROLLOUTER_PAUSED = MetricDef(
    "verl_async_rollouter_paused",
    "gauge",
    "1 while the rollouter holds back new samples (queue full or staleness limit reached), else 0.",
    unit="",
)
ASYNC_ROLLOUTER_INFLIGHT = MetricDef(
    "verl_async_rollouter_inflight",
    "gauge",
    "Samples the rollouter is generating now.",
    unit="{sample}",
)

METRICS: Final[tuple[MetricDef, ...]] = (
    ROLLOUT_SAMPLES_COMPLETED,
    ROLLOUT_SAMPLES_EXPECTED,
    ROLLOUT_SAMPLES_INFLIGHT,
    ROLLOUT_OLDEST_INFLIGHT,
    ROLLOUT_ELAPSED,
    ROLLOUT_ETA,
    TRAINING_STEP,
    TRAINING_STEPS_PLANNED,
    TRAINING_LAST_STEP,
    TRAINING_ETA,
    PHASE_ACTIVE,
    PHASE_ELAPSED,
    STEP_DURATION,
    PHASE_DURATION,
    UPDATE_MINIBATCHES_COMPLETED,
    UPDATE_MINIBATCHES_EXPECTED,
    UPDATE_EPOCH,
    UPDATE_ETA,
    TRAINING_METRIC,
    PHASE_PEAK_MEMORY,
    STALL_ACTIVE,
    STALLS_TOTAL,
    CAPTURES_TOTAL,
    OTEL_DROPPED,
    ASYNC_SAMPLES_PRODUCED,
    ASYNC_SAMPLES_DROPPED,
    ASYNC_QUEUE_DEPTH,
    ASYNC_QUEUE_CAPACITY,
    ASYNC_PARAM_VERSION,
    ASYNC_STALENESS,
    ASYNC_STALENESS_MEAN,
    ASYNC_IDLE_RATIO,
    ASYNC_ROLLOUTER_PAUSED,
    ASYNC_ROLLOUTER_INFLIGHT,
    *WHY_METRICS,
    *GOODPUT_METRICS,
    *AGENT_METRICS,
)
assert len({m.name for m in METRICS}) == len(METRICS), "metric names must be unique"

# Metrics of other exporters that dashboards and alerts read: everything else they name must be a METRICS entry
# (tests/test_dashboards.py checks every expression).
DCGM_FB_USED: Final = "DCGM_FI_DEV_FB_USED"
DCGM_FB_FREE: Final = "DCGM_FI_DEV_FB_FREE"
#: The Collector's own metrics (its :8888 reader, deploy/otel-collector/config.yaml: no type or unit suffixes)
OTELCOL_SEND_FAILED_SPANS: Final = "otelcol_exporter_send_failed_spans"
OTELCOL_SEND_FAILED_POINTS: Final = "otelcol_exporter_send_failed_metric_points"
OTELCOL_ENQUEUE_FAILED_SPANS: Final = "otelcol_exporter_enqueue_failed_spans"
OTELCOL_ENQUEUE_FAILED_POINTS: Final = "otelcol_exporter_enqueue_failed_metric_points"
OTELCOL_REFUSED_SPANS: Final = "otelcol_receiver_refused_spans"
OTELCOL_REFUSED_POINTS: Final = "otelcol_receiver_refused_metric_points"
PROM_UP: Final = "up"
PROM_ALERTS: Final = "ALERTS"
EXTERNAL_METRICS: Final[dict[str, str]] = {
    DCGM_FB_USED: "NVIDIA dcgm-exporter (`--profile gpu`): framebuffer memory used, MiB, labels gpu/UUID/Hostname",
    DCGM_FB_FREE: "NVIDIA dcgm-exporter (`--profile gpu`): framebuffer memory free, MiB",
    OTELCOL_SEND_FAILED_SPANS: "Collector: spans an exporter failed to send (after its retries), label exporter",
    OTELCOL_SEND_FAILED_POINTS: "Collector: metric points an exporter failed to send, label exporter",
    OTELCOL_ENQUEUE_FAILED_SPANS: "Collector: spans dropped because an exporter's sending queue was full",
    OTELCOL_ENQUEUE_FAILED_POINTS: "Collector: metric points dropped because an exporter's sending queue was full",
    OTELCOL_REFUSED_SPANS: "Collector: spans a receiver refused (memory_limiter above its limit, or a pipeline error)",
    OTELCOL_REFUSED_POINTS: "Collector: metric points a receiver refused (memory_limiter, or a pipeline error)",
    PROM_UP: "Prometheus: 1 if the last scrape of a target succeeded, labels job/instance",
    PROM_ALERTS: "Prometheus: one series per pending or firing alert, labels alertname/alertstate and the rule's",
    **VLLM_METRICS,
}

#: Reasons for verl_otel_dropped_total
DROP_NON_SCALAR: Final = "non_scalar"
DROP_NON_FINITE: Final = "non_finite"
DROP_KEY_CAP: Final = "key_cap"
DROP_EXPORT: Final = "export_failed"
DROP_QUEUE: Final = "queue_full"
DROP_WRITE: Final = "write_failed"  # the trace file could not be written (disk full, not a regular file)
DROP_BAD_KEY: Final = "bad_key"  # a metric key that cannot be turned into text
DROP_BUFFER_FULL: Final = "buffer_full"  # spans waiting for the collector past VERL_OTEL_EXPORT_BUFFER_MB (memory+disk)
DROP_REJECTED: Final = "rejected"  # spans the collector refused for good (invalid, unauthenticated, too large)
DROP_REASONS: Final = (
    DROP_NON_SCALAR,
    DROP_NON_FINITE,
    DROP_KEY_CAP,
    DROP_EXPORT,
    DROP_QUEUE,
    DROP_WRITE,
    DROP_BAD_KEY,
    DROP_BUFFER_FULL,
    DROP_REJECTED,
)
