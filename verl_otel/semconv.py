"""The verl-otel vocabulary: every span name, attribute key, metric name, label and unit.

Hooks, exporters, the CLI, dashboards and alert rules import names from here (or are tested
against it). Metric names are a user-facing API: dashboards and alerts depend on them, so a
rename needs a deprecation note in the README, as vLLM does for its ``vllm:`` metrics.

No label carries a step number, sample index, uid or trace id: identities live in traces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

INSTRUMENTATION_NAME: Final = "verl_otel"
SERVICE_NAME_DEFAULT: Final = "verl"

# --------------------------------------------------------------------------------------------
# Phases: verl's marked_timer names -> our canonical span names
# --------------------------------------------------------------------------------------------
PHASE_ROLLOUT: Final = "rollout"
PHASE_REWARD: Final = "reward"
PHASE_OLD_LOG_PROB: Final = "old_log_prob"
PHASE_REF: Final = "ref"
PHASE_VALUES: Final = "values"
PHASE_ADV: Final = "adv"
PHASE_UPDATE_CRITIC: Final = "update_critic"
PHASE_UPDATE_ACTOR: Final = "update_actor"
PHASE_SAVE_CHECKPOINT: Final = "save_checkpoint"
PHASE_UPDATE_WEIGHTS: Final = "update_weights"
PHASE_VALIDATE: Final = "validate"

#: verl timer name -> canonical phase. Agent loops also call the timer once per sample: anything
#: not in this table is ignored (a whitelist keeps the hot path free of spans).
VERL_TIMER_TO_PHASE: Final[dict[str, str]] = {
    "gen": PHASE_ROLLOUT,
    "reward": PHASE_REWARD,
    "old_log_prob": PHASE_OLD_LOG_PROB,
    "ref": PHASE_REF,
    "values": PHASE_VALUES,
    "adv": PHASE_ADV,
    "update_critic": PHASE_UPDATE_CRITIC,
    "update_actor": PHASE_UPDATE_ACTOR,
    "save_checkpoint": PHASE_SAVE_CHECKPOINT,
    "update_weights": PHASE_UPDATE_WEIGHTS,
    "testing": PHASE_VALIDATE,
    # async trainers' own phases keep verl's names
    "switch_to_trainer": "switch_to_trainer",
    "switch_to_rollout": "switch_to_rollout",
    "switch_wait": "switch_wait",
    "dump_rollout_generations": "dump_rollout_generations",
    # fully_async's trainer
    "wait_for_enough_samples": "wait_for_enough_samples",
    "timing_s/param_sync": "param_sync",
}
#: verl's timer around the whole step (the root span is opened by our fit/step hook instead).
VERL_TIMER_STEP: Final = "step"

PHASES: Final[tuple[str, ...]] = (
    PHASE_ROLLOUT,
    PHASE_REWARD,
    PHASE_OLD_LOG_PROB,
    PHASE_REF,
    PHASE_VALUES,
    PHASE_ADV,
    PHASE_UPDATE_CRITIC,
    PHASE_UPDATE_ACTOR,
    PHASE_SAVE_CHECKPOINT,
    PHASE_UPDATE_WEIGHTS,
    PHASE_VALIDATE,
)

# --------------------------------------------------------------------------------------------
# Spans
# --------------------------------------------------------------------------------------------
SPAN_STEP: Final = "step"
SPAN_ROLLOUT_WORKER: Final = "rollout.worker"
SPAN_ROLLOUT_SAMPLE: Final = "rollout.sample"
#: fully_async runs a weight sync, a validation and the final checkpoint after its last step, outside
#: any fit_step: their phases go under this root (its own trace, global step = the last step), not a step
SPAN_FIT_END: Final = "fit.end"

# Attributes on the step span
ATTR_GLOBAL_STEP: Final = "verl.global_step"
# the OpenTelemetry semantic conventions' exception event attributes
ATTR_EXC_TYPE: Final = "exception.type"
ATTR_EXC_MESSAGE: Final = "exception.message"
ATTR_EXC_STACKTRACE: Final = "exception.stacktrace"
ATTR_EPOCH: Final = "verl.epoch"
ATTR_PROJECT: Final = "verl.project"
ATTR_EXPERIMENT: Final = "verl.experiment"
ATTR_TRAINER: Final = "verl.trainer"
ATTR_TRAINER_MODE: Final = "verl.trainer_mode"  # v1: sync / colocate_async / separate_async
ATTR_ROLLOUT_N: Final = "verl.rollout_n"
ATTR_BATCH_SIZE: Final = "verl.batch_size"
ATTR_PHASE: Final = "verl.phase"
ATTR_PHASE_SLOWEST: Final = "verl.slowest_phase"
ATTR_STEPS_PLANNED: Final = "verl.steps_planned"
#: On a step (and the phase it stopped in) that ended by verl's own stop signal, not an error:
#: fully_async's last fit_step finds the queue closed and raises TrainingStopException in ``gen``.
ATTR_STOPPED: Final = "verl.stopped"
#: Exception classes (by name) verl raises to end training normally.
VERL_STOP_EXCEPTIONS: Final = frozenset({"TrainingStopException"})
#: verl's validation metric keys start with this (``val-core/...``, ``val-aux/...``).
VERL_VAL_METRIC_PREFIX: Final = "val-"

# verl's own metric keys (the `key` label of verl_training_metric) that alerts, panels and span attributes name.
# The health signals of the log-reading guides; verl logs no standard deviation of the training reward, only the
# batch's max and min.
KEY_SCORE_MEAN: Final = "critic/score/mean"
KEY_SCORE_MAX: Final = "critic/score/max"
KEY_SCORE_MIN: Final = "critic/score/min"
KEY_REWARD_MEAN: Final = "critic/rewards/mean"
KEY_ENTROPY: Final = "actor/entropy"
KEY_PPO_KL: Final = "actor/ppo_kl"  # drift of one update (the guides' "KL to the reference" in older verl logs)
KEY_KL_LOSS: Final = "actor/kl_loss"  # KL to the reference, with actor.use_kl_loss
KEY_REWARD_KL: Final = "actor/reward_kl_penalty"  # KL to the reference, with the KL in the reward
KEY_PG_LOSS: Final = "actor/pg_loss"
KEY_PG_CLIPFRAC: Final = "actor/pg_clipfrac"
KEY_ACTOR_GRAD_NORM: Final = "actor/grad_norm"
KEY_CRITIC_GRAD_NORM: Final = "critic/grad_norm"
KEY_VF_LOSS: Final = "critic/vf_loss"
KEY_RESPONSE_LENGTH_MEAN: Final = "response_length/mean"
KEY_THROUGHPUT: Final = "perf/throughput"
KEY_STEP_TIME: Final = "timing_s/step"
#: a regex: ``actor/perf/...`` since verl 0.9, ``perf/...`` before; GiB (torch's max_memory_reserved / 2**30)
KEY_MAX_MEMORY_RESERVED_RE: Final = "(.+/)?perf/max_memory_reserved_gb"
#: verl's validation keys: ``val-core/<data source>/...`` since 0.4, ``val/test_score/<data source>`` before (the
#: guides' GSM8K accuracy); regexes
KEY_VAL_CORE_RE: Final = "val-core/.*"
KEY_VAL_TEST_SCORE_RE: Final = "val/test_score/.*"

#: verl metric key -> step-span attribute, so Jaeger can search steps by them.
STEP_METRIC_ATTRS: Final[dict[str, str]] = {
    KEY_SCORE_MEAN: "verl.score_mean",
    KEY_REWARD_MEAN: "verl.reward_mean",
    KEY_RESPONSE_LENGTH_MEAN: "verl.response_length_mean",
    KEY_STEP_TIME: "verl.step_time_s",
    KEY_THROUGHPUT: "verl.throughput",
    KEY_ENTROPY: "verl.entropy",
    KEY_ACTOR_GRAD_NORM: "verl.grad_norm",
}

# Attributes on rollout spans (README, "What a step trace looks like")
ATTR_WORKER_INDEX: Final = "verl.rollout.worker"
ATTR_MODE: Final = "verl.rollout.mode"
ATTR_SAMPLES: Final = "verl.rollout.samples"
ATTR_SAMPLES_SPANNED: Final = "verl.rollout.samples_spanned"
ATTR_SAMPLE_INDEX: Final = "verl.sample.index"
ATTR_SAMPLE_ROLLOUT_N: Final = "verl.sample.rollout_n"
ATTR_SAMPLE_PROMPT_TOKENS: Final = "verl.sample.prompt_tokens"
ATTR_SAMPLE_RESPONSE_TOKENS: Final = "verl.sample.response_tokens"
ATTR_SAMPLE_TURNS: Final = "verl.sample.turns"
ATTR_SAMPLE_TOOL_CALLS: Final = "verl.sample.tool_calls"
ATTR_SAMPLE_SCORE: Final = "verl.sample.reward_score"
#: verl's per-sample timings (AgentLoopMetrics field -> attribute)
SAMPLE_TIMING_ATTRS: Final[dict[str, str]] = {
    "generate_sequences": "verl.sample.generate_s",
    "tool_calls": "verl.sample.tool_calls_s",
    "compute_score": "verl.sample.compute_score_s",
    "num_preempted": "verl.sample.preemptions",
}
# Validation generations (the samples verl picks for trainer.log_val_generations)
EVENT_VAL_GENERATION: Final = "verl.val_generation"
ATTR_VAL_GENERATIONS: Final = "verl.val_generations.count"
ATTR_VAL_INPUT: Final = "verl.val_generation.input"
ATTR_VAL_OUTPUT: Final = "verl.val_generation.output"
ATTR_VAL_SCORE: Final = "verl.val_generation.score"
ATTR_VAL_TRUNCATED: Final = "verl.val_generation.truncated"
#: On the validate span: the data sources the validation scored (from verl's val-core/<source>/... keys);
#: verl's generation samples do not say theirs, so one source names them all, several leave it open
ATTR_VAL_DATA_SOURCES: Final = "verl.val_generation.data_sources"

#: Key under which the trainer's W3C traceparent travels in verl's batch (meta_info / TensorDict)
TRACEPARENT_KEY: Final = "verl_otel_traceparent"
SAMPLE_SPAN_ID_KEY: Final = "verl_otel_span_id"  # our copy of a sample's trajectory: the id its engine requests named
# fully_async: the rollouter's parameter version, beside the traceparent in a batch's meta_info (console numbering)
PARAM_VERSION_KEY: Final = "verl_otel_param_version"

# Spans of the training workers' calls, under the trainer's phase span (README, "What a step trace looks like").
#: worker-group method -> span name; only these calls carry the trainer's context
WORKER_SPAN_NAMES: Final[dict[str, str]] = {
    "update_actor": "worker.update_actor",
    "compute_log_prob": "worker.compute_log_prob",
    "compute_ref_log_prob": "worker.compute_ref_log_prob",
    "train_mini_batch": "worker.train_mini_batch",  # critic update (v1 / engine workers)
    "infer_batch": "worker.infer_batch",  # critic values
}
#: the streaming reward loop (agent-loop worker -> reward-loop worker, one call per sample): per
#: trainer span a ``reward.worker`` span with the counts and the slowest calls under it
SPAN_REWARD_WORKER: Final = "reward.worker"
SPAN_REWARD_SCORE: Final = "reward.compute_score"
ATTR_REWARD_CALLS: Final = "verl.reward.calls"
ATTR_REWARD_CALLS_SPANNED: Final = "verl.reward.calls_spanned"
ATTR_REWARD_ERRORS: Final = "verl.reward.errors"
ATTR_REWARD_DATA_SOURCE: Final = "verl.reward.data_source"
ATTR_WORKER_METHOD: Final = "verl.worker.method"
ATTR_WORKER_ROLE: Final = "verl.worker.role"
ATTR_WORKER_RANK: Final = "verl.worker.rank"
ATTR_WORKER_BATCH: Final = "verl.worker.batch_size"
#: spans of a step's trace that are not phases
NON_PHASE_SPANS: Final[frozenset[str]] = frozenset(
    {SPAN_STEP, SPAN_FIT_END, SPAN_ROLLOUT_WORKER, SPAN_ROLLOUT_SAMPLE, SPAN_REWARD_WORKER, SPAN_REWARD_SCORE,
     *WORKER_SPAN_NAMES.values()})

# Resource attributes: what each process is (and of which run, where the process knows it)
RES_PROJECT: Final = ATTR_PROJECT
RES_EXPERIMENT: Final = ATTR_EXPERIMENT
RES_ROLE: Final = "verl.process.role"
RES_WORKER_INDEX: Final = "verl.process.worker_index"
RES_NODE: Final = "host.name"
RES_PID: Final = "process.pid"
#: One process (the Collector's prometheus exporter makes it the series' ``instance``, as host:port is on the
#: pull path): host, role and pid, readable in Grafana's $instance list
RES_INSTANCE: Final = "service.instance.id"

#: Process roles (resource attribute values)
ROLE_DRIVER: Final = "driver"
ROLE_TRAINER: Final = "trainer"
ROLE_AGENT_LOOP: Final = "agent_loop_worker"
ROLE_REWARD: Final = "reward_worker"
ROLE_WORKER: Final = "train_worker"
ROLE_OTHER: Final = "ray_worker"

# --------------------------------------------------------------------------------------------
# Async trainers (fully_async): the rollouter service, parameter versions, staleness
# --------------------------------------------------------------------------------------------
#: fully_async's FullyAsyncRollouter actor: its own service/process role.
ROLE_ROLLOUTER: Final = "rollouter"
#: One span per parameter-version window of the rollouter: from one parameter sync
#: (verl's ``reset_staleness``) to the next; the samples it started in that window carry its context.
SPAN_ROLLOUTER_GENERATE: Final = "rollouter.generate"
#: The rollouter's validation run (``do_validate``, called by the trainer).
SPAN_ROLLOUTER_VALIDATE: Final = "rollouter.validate"
#: Parameter (weights) version: fully_async's ``current_param_version`` (one per parameter sync); on a v1
#: step link, the oldest weights version (max_global_steps) that finished the linked samples. On v1 links
#: ATTR_GLOBAL_STEP names the step that submitted the prompts.
ATTR_PARAM_VERSION: Final = "verl.param_version"
#: On a fully_async rollouter sample: the weights version that finished it (partial rollouts span versions).
ATTR_PARAM_VERSION_END: Final = "verl.param_version_end"
#: fully_async's RolloutSample.sample_id.
ATTR_SAMPLE_ID: Final = "verl.sample.id"
#: Trainer's parameter version minus the version that generated the samples (on step links).
ATTR_STALENESS: Final = "verl.staleness"
#: Samples: produced in a rollouter window, or (on a step's link) taken from that window / submitting step
#: (fully_async counts prompt groups, v1 trajectories).
ATTR_ASYNC_SAMPLES: Final = "verl.async.samples"
#: Samples the rollouter dropped in the window (queue full).
ATTR_ASYNC_DROPPED: Final = "verl.async.dropped"
#: verl's own rollouter idle ratio of the window (fully_async/rollouter/idle_ratio).
ATTR_ASYNC_IDLE_RATIO: Final = "verl.async.idle_ratio"
#: Attribute set on verl's RolloutSample object (not in its data): (traceparent, param version)
#: of the rollouter window, pickled with the sample through the MessageQueue.
ROLLOUT_SAMPLE_TRACE_ATTR: Final = "_verl_otel_rollout_trace"

TRAINER_LEGACY: Final = "legacy"
TRAINER_V1: Final = "v1"
TRAINER_FULLY_ASYNC: Final = "fully_async"

# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------
MetricKind = Literal["gauge", "counter", "histogram"]

LABEL_WORKER: Final = "worker"
LABEL_MODE: Final = "mode"
LABEL_PHASE: Final = "phase"
LABEL_ROLE: Final = "role"
LABEL_KEY: Final = "key"
LABEL_REASON: Final = "reason"
#: Per-process labels. Pull path: file_sd target labels; push path: the same names come from the
#: resource attributes through the Collector's resource_to_telemetry_conversion (`.` -> `_`).
LABEL_PROJECT: Final = "verl_project"
LABEL_EXPERIMENT: Final = "verl_experiment"
LABEL_PROCESS_ROLE: Final = "verl_process_role"

MODE_TRAIN: Final = "train"
MODE_VALIDATE: Final = "validate"

#: Histogram buckets, seconds: one second to hours (a step takes minutes).
DURATION_BUCKETS_S: Final[tuple[float, ...]] = (
    1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400,
)


@dataclass(frozen=True)
class MetricDef:
    """One exported metric. ``name`` is the Prometheus name users see; ``otel_name`` and
    ``unit`` are chosen so the OTel Collector's prometheus exporter translates back to it."""

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""
    otel_name: str = ""
    buckets: tuple[float, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.otel_name:
            object.__setattr__(self, "otel_name", _otel_name_for(self.name, self.kind))


def _otel_name_for(name: str, kind: MetricKind) -> str:
    # Counters get `_total` appended by the OTLP->Prometheus translation: define them without it.
    if kind == "counter" and name.endswith("_total"):
        return name[: -len("_total")]
    return name


_ROLLOUT_LABELS = (LABEL_WORKER, LABEL_MODE)

ROLLOUT_SAMPLES_COMPLETED = MetricDef(
    "verl_rollout_samples_completed", "gauge",
    "Samples (agent loops) finished so far in the current rollout of this agent-loop worker.",
    _ROLLOUT_LABELS, unit="{sample}",
)
ROLLOUT_SAMPLES_EXPECTED = MetricDef(
    "verl_rollout_samples_expected", "gauge",
    "Samples this agent-loop worker was given in the current rollout.", _ROLLOUT_LABELS, unit="{sample}",
)
ROLLOUT_SAMPLES_INFLIGHT = MetricDef(
    "verl_rollout_samples_inflight", "gauge",
    "Samples started and not yet finished on this agent-loop worker.", _ROLLOUT_LABELS, unit="{sample}",
)
ROLLOUT_OLDEST_INFLIGHT = MetricDef(
    "verl_rollout_oldest_inflight_seconds", "gauge",
    "Age of the longest-running unfinished sample: a lost request keeps growing here.",
    _ROLLOUT_LABELS, unit="s",
)
ROLLOUT_ELAPSED = MetricDef(
    "verl_rollout_elapsed_seconds", "gauge",
    "Seconds since the current rollout started on this worker.", _ROLLOUT_LABELS, unit="s",
)
ROLLOUT_ETA = MetricDef(
    "verl_rollout_eta_seconds", "gauge",
    "Estimated seconds until this worker's rollout completes (elapsed/completed x remaining).",
    _ROLLOUT_LABELS, unit="s",
)

TRAINING_STEP = MetricDef(
    "verl_training_step", "gauge", "Current trainer global step.", unit="{step}",
)
TRAINING_STEPS_PLANNED = MetricDef(
    "verl_training_steps_planned", "gauge", "Total global steps this run plans (trainer.total_training_steps).",
    unit="{step}",
)
TRAINING_LAST_STEP = MetricDef(
    "verl_training_last_step_timestamp_seconds", "gauge",
    "Unix time the last global step ended (step-stalled alerts compare it with the typical step time).", unit="s",
)
TRAINING_ETA = MetricDef(
    "verl_training_eta_seconds", "gauge", "Run ETA from the mean of recent step durations.", unit="s",
)
PHASE_ACTIVE = MetricDef(
    "verl_phase_active", "gauge", "1 while the phase runs, else 0.", (LABEL_PHASE,), unit="",
)
PHASE_ELAPSED = MetricDef(
    "verl_phase_elapsed_seconds", "gauge",
    "Live elapsed time of the running phase (the heartbeat: growing = running, frozen at 0 = idle).",
    (LABEL_PHASE,), unit="s",
)
STEP_DURATION = MetricDef(
    "verl_step_duration_seconds", "histogram",
    "Duration of each global step; exemplars carry the step's trace id.", unit="s", buckets=DURATION_BUCKETS_S,
)
PHASE_DURATION = MetricDef(
    "verl_phase_duration_seconds", "histogram",
    "Duration of each phase run; exemplars carry the step's trace id.", (LABEL_PHASE,), unit="s",
    buckets=DURATION_BUCKETS_S,
)

UPDATE_MINIBATCHES_COMPLETED = MetricDef(
    "verl_update_minibatches_completed", "gauge",
    "Optimizer mini-batches done in the current actor/critic update.", (LABEL_ROLE,), unit="{minibatch}",
)
UPDATE_MINIBATCHES_EXPECTED = MetricDef(
    "verl_update_minibatches_expected", "gauge",
    "Optimizer mini-batches the current actor/critic update will run (all PPO epochs).", (LABEL_ROLE,),
    unit="{minibatch}",
)
UPDATE_EPOCH = MetricDef(
    "verl_update_epoch", "gauge", "Current PPO epoch (1-based) of the update.", (LABEL_ROLE,), unit="{epoch}",
)
UPDATE_ETA = MetricDef(
    "verl_update_eta_seconds", "gauge", "Estimated seconds until the current update completes.", (LABEL_ROLE,),
    unit="s",
)

TRAINING_METRIC = MetricDef(
    "verl_training_metric", "gauge",
    "Every scalar verl logs per step, by verl's own key (e.g. critic/score/mean).", (LABEL_KEY,), unit="",
)
PHASE_PEAK_MEMORY = MetricDef(
    "verl_phase_peak_memory_bytes", "gauge",
    "Peak accelerator memory allocated during the last run of the phase (torch.cuda only).",
    (LABEL_PHASE, LABEL_ROLE), unit="By",
)

OTEL_DROPPED = MetricDef(
    "verl_otel_dropped_total", "counter",
    "Telemetry items dropped (queue full, exporter failure, bad value, key cap), by reason.", (LABEL_REASON,),
    unit="{item}",
)

# Async trainers (fully_async). The role label says which process observed the value.
ASYNC_SAMPLES_PRODUCED = MetricDef(
    "verl_async_samples_produced_total", "counter",
    "Samples (prompt groups) the rollouter put into the MessageQueue since it started.", unit="{sample}",
)
ASYNC_SAMPLES_DROPPED = MetricDef(
    "verl_async_samples_dropped_total", "counter",
    "Samples the MessageQueue dropped because it was full.", unit="{sample}",
)
ASYNC_QUEUE_DEPTH = MetricDef(
    "verl_async_queue_depth", "gauge",
    "Samples waiting in the MessageQueue, as last seen by this process (rollouter: just before each of "
    "its puts; trainer: after each take).", (LABEL_ROLE,), unit="{sample}",
)
ASYNC_QUEUE_CAPACITY = MetricDef(
    "verl_async_queue_capacity", "gauge", "MessageQueue size limit (max_queue_size).", unit="{sample}",
)
ASYNC_PARAM_VERSION = MetricDef(
    "verl_async_param_version", "gauge",
    "Parameter version: the trainer's current_param_version, or the version the rollouter generates with.",
    (LABEL_ROLE,), unit="{version}",
)
ASYNC_STALENESS = MetricDef(
    "verl_async_staleness", "gauge",
    "Largest staleness (trainer version minus generating version) in the last batch the trainer took.",
    unit="{version}",
)
ASYNC_STALENESS_MEAN = MetricDef(
    "verl_async_staleness_mean", "gauge",
    "Mean staleness over the samples of the last batch the trainer took.", unit="{version}",
)
ASYNC_IDLE_RATIO = MetricDef(
    "verl_async_idle_ratio", "gauge",
    "Live share of the current parameter-version window spent idle: the trainer waiting for samples, "
    "the rollouter paused (verl's own fully_async/<role>/idle_ratio, evaluated now).", (LABEL_ROLE,), unit="1",
)
ASYNC_ROLLOUTER_PAUSED = MetricDef(
    "verl_async_rollouter_paused", "gauge",
    "1 while the rollouter holds back new samples (queue full or staleness limit reached), else 0.", unit="",
)
ASYNC_ROLLOUTER_INFLIGHT = MetricDef(
    "verl_async_rollouter_inflight", "gauge", "Samples the rollouter is generating now.", unit="{sample}",
)

METRICS: Final[tuple[MetricDef, ...]] = (
    ROLLOUT_SAMPLES_COMPLETED, ROLLOUT_SAMPLES_EXPECTED, ROLLOUT_SAMPLES_INFLIGHT, ROLLOUT_OLDEST_INFLIGHT,
    ROLLOUT_ELAPSED, ROLLOUT_ETA,
    TRAINING_STEP, TRAINING_STEPS_PLANNED, TRAINING_LAST_STEP, TRAINING_ETA, PHASE_ACTIVE, PHASE_ELAPSED, STEP_DURATION,
    PHASE_DURATION,
    UPDATE_MINIBATCHES_COMPLETED, UPDATE_MINIBATCHES_EXPECTED, UPDATE_EPOCH, UPDATE_ETA,
    TRAINING_METRIC, PHASE_PEAK_MEMORY, OTEL_DROPPED,
    ASYNC_SAMPLES_PRODUCED, ASYNC_SAMPLES_DROPPED, ASYNC_QUEUE_DEPTH, ASYNC_QUEUE_CAPACITY, ASYNC_PARAM_VERSION,
    ASYNC_STALENESS, ASYNC_STALENESS_MEAN, ASYNC_IDLE_RATIO, ASYNC_ROLLOUTER_PAUSED, ASYNC_ROLLOUTER_INFLIGHT,
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
#: vLLM's Prometheus series the "Rollout engine" dashboard row and alerts read (vLLM's names, not ours)
VLLM_REQUESTS_RUNNING: Final = "vllm:num_requests_running"
VLLM_REQUESTS_WAITING: Final = "vllm:num_requests_waiting"
VLLM_KV_CACHE_USAGE: Final = "vllm:kv_cache_usage_perc"
VLLM_PREEMPTIONS: Final = "vllm:num_preemptions_total"
VLLM_TTFT_BUCKET: Final = "vllm:time_to_first_token_seconds_bucket"  # histograms: the series queries read
VLLM_TPOT_BUCKET: Final = "vllm:inter_token_latency_seconds_bucket"
VLLM_GENERATION_TOKENS: Final = "vllm:generation_tokens_total"

EXTERNAL_METRICS: Final[dict[str, str]] = {
    VLLM_REQUESTS_RUNNING: "vLLM (each rollout server's /metrics, file_sd role rollout_server): requests generating",
    VLLM_REQUESTS_WAITING: "vLLM: requests queued, not yet scheduled",
    VLLM_KV_CACHE_USAGE: "vLLM: share of the KV cache in use (0..1)",
    VLLM_PREEMPTIONS: "vLLM: requests preempted (KV cache full), counter",
    VLLM_TTFT_BUCKET: "vLLM: time to first token, histogram buckets (seconds)",
    VLLM_TPOT_BUCKET: "vLLM: time between output tokens, histogram buckets (seconds)",
    VLLM_GENERATION_TOKENS: "vLLM: tokens generated, counter",
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
}

#: Reasons for verl_otel_dropped_total
DROP_NON_SCALAR: Final = "non_scalar"
DROP_NON_FINITE: Final = "non_finite"
DROP_KEY_CAP: Final = "key_cap"
DROP_EXPORT: Final = "export_failed"
DROP_QUEUE: Final = "queue_full"
DROP_WRITE: Final = "write_failed"  # the trace file could not be written (disk full, not a regular file)
DROP_BAD_KEY: Final = "bad_key"  # a metric key that cannot be turned into text
DROP_REASONS: Final = (DROP_NON_SCALAR, DROP_NON_FINITE, DROP_KEY_CAP, DROP_EXPORT, DROP_QUEUE, DROP_WRITE,
                       DROP_BAD_KEY)

# --------------------------------------------------------------------------------------------
# Environment variables (ours, VERL_PROGRESS_* and the standard OTEL_* ones)
# --------------------------------------------------------------------------------------------
ENV_ENABLED: Final = "VERL_OTEL_ENABLED"
ENV_DIR: Final = "VERL_OTEL_DIR"
ENV_PROM_PORT: Final = "VERL_OTEL_PROMETHEUS_PORT"
ENV_PROM_HOST: Final = "VERL_OTEL_PROMETHEUS_HOST"
ENV_SAMPLE_SPANS: Final = "VERL_OTEL_SAMPLE_SPANS"
ENV_CAPTURE_TEXT: Final = "VERL_OTEL_CAPTURE_TEXT"
ENV_MAX_TEXT: Final = "VERL_OTEL_MAX_TEXT"
ENV_MAX_METRIC_KEYS: Final = "VERL_OTEL_MAX_METRIC_KEYS"
ENV_CONSOLE: Final = "VERL_OTEL_CONSOLE"
ENV_ROLE: Final = "VERL_OTEL_ROLE"
ENV_SHUTDOWN_TIMEOUT: Final = "VERL_OTEL_SHUTDOWN_TIMEOUT"  # seconds fit end may wait for exports, in total
ENV_MAX_FILE_MB: Final = "VERL_OTEL_MAX_FILE_MB"  # the trace file rotates past this size
ENV_MAX_FILES: Final = "VERL_OTEL_MAX_FILES"  # trace files kept: traces.jsonl and traces.jsonl.1 .. .N-1
ENV_LOG_LEVEL: Final = "VERL_OTEL_LOG_LEVEL"
ENV_ENGINE_SPANS: Final = "VERL_OTEL_ENGINE_SPANS"  # 0: no inference-engine (vLLM) request spans under samples
# set by us in a rollout server whose engine tracing we switched on: the OTLP endpoint we gave the engine
# (vLLM then exports OTEL_EXPORTER_OTLP_TRACES_ENDPOINT with it; that one is not the user's collector)
ENV_ENGINE_ENDPOINT: Final = "VERL_OTEL_ENGINE_ENDPOINT"  # the start-up parser's copy: _env.ENGINE_ENDPOINT

ENV_PROGRESS_LOG: Final = "VERL_PROGRESS_LOG"
ENV_PROGRESS_LOG_INTERVAL: Final = "VERL_PROGRESS_LOG_INTERVAL"
ENV_PROGRESS_BAR_INTERVAL: Final = "VERL_PROGRESS_BAR_INTERVAL"
ENV_PROGRESS_HEARTBEAT_SEC: Final = "VERL_PROGRESS_HEARTBEAT_SEC"
ENV_PROGRESS_LOG_META_PREVIEW: Final = "VERL_PROGRESS_LOG_META_PREVIEW"
ENV_ROLLOUT_PROGRESS_INTERVAL: Final = "VERL_ROLLOUT_PROGRESS_INTERVAL"
ENV_ROLLOUT_PROGRESS_WORKER_INDEX: Final = "VERL_ROLLOUT_PROGRESS_WORKER_INDEX"
ENV_ROLLOUT_PROGRESS_BAR_WIDTH: Final = "VERL_ROLLOUT_PROGRESS_BAR_WIDTH"

#: Environment prefixes that travel to every Ray worker of the job (runtime_env env_vars).
PROPAGATED_ENV_PREFIXES: Final[tuple[str, ...]] = ("VERL_OTEL_", "OTEL_", "VERL_PROGRESS_", "VERL_ROLLOUT_PROGRESS_")

# --------------------------------------------------------------------------------------------
# The rollout engine (vLLM): its request spans under our samples, its /metrics in our file_sd
# --------------------------------------------------------------------------------------------
ROLE_ROLLOUT_SERVER: Final = "rollout_server"  # file_sd role of a rollout server's own /metrics (vLLM's page)
LABEL_REPLICA: Final = "replica"  # file_sd label: the rollout replica's rank
SPAN_ENGINE_REQUEST: Final = "llm_request"  # vLLM's span, one per request
ATTR_ENGINE_REPLICA: Final = "verl.rollout.replica"  # ours, on vLLM's span: the rollout replica that served it
#: vLLM's attributes on it (vLLM 0.32, gen_ai.* semantic conventions), seconds
ENGINE_ATTR_QUEUE: Final = "gen_ai.latency.time_in_queue"
ENGINE_ATTR_PREFILL: Final = "gen_ai.latency.time_in_model_prefill"
ENGINE_ATTR_DECODE: Final = "gen_ai.latency.time_in_model_decode"
ENGINE_ATTR_TTFT: Final = "gen_ai.latency.time_to_first_token"
ENGINE_ATTR_E2E: Final = "gen_ai.latency.e2e"
ENGINE_ATTR_REQUEST_ID: Final = "gen_ai.request.id"
ENGINE_ATTR_PROMPT_TOKENS: Final = "gen_ai.usage.prompt_tokens"
ENGINE_ATTR_COMPLETION_TOKENS: Final = "gen_ai.usage.completion_tokens"

# Embedded-default file names under VERL_OTEL_DIR
TRACES_FILE: Final = "traces.jsonl"
PROM_TARGETS_FILE: Final = "prometheus_targets.json"
