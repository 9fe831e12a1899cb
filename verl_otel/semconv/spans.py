"""Span names, span/resource attribute keys, phases, process roles and trainer kinds."""

from __future__ import annotations

from typing import Final

from verl_otel.semconv.engine import PROCESS_ROLE_ROLLOUT_SERVER
from verl_otel.semconv.stall import SPAN_STALL

INSTRUMENTATION_NAME: Final = "verl_otel"
INSTRUMENTATION_VERSION: Final = "0.1.0"  # the tracers' and meters' version: pyproject's (tests/test_log_and_sdk.py)
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
#: fully_async's weight sync (verl's ``timing_s/param_sync`` timer), its ``update_weights``
PHASE_PARAM_SYNC: Final = "param_sync"
#: the phases a trainer syncs weights in: the first of them in a step gets the span id its workers derive
WEIGHT_SYNC_PHASES: Final[frozenset[str]] = frozenset((PHASE_UPDATE_WEIGHTS, PHASE_PARAM_SYNC))

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

# The step summary: at each step's end the trainer writes one more span, a root of its own trace (linked to the
# step span), that copies the step span's attributes and adds its phases. A search for it answers small traces,
# so a reader ranks a long run's steps from Jaeger without fetching every step's whole trace.
SPAN_STEP_SUMMARY: Final = "step.summary"
#: the step's trace (32 hex digits): the trace a reader fetches for a step it shows
ATTR_SUMMARY_TRACE_ID: Final = "verl.summary.trace_id"
#: the step's phases (names, in the order they first ran), and aligned with them: seconds (summed over a phase's
#: runs), runs, and tokens handled (0: a phase that handles none)
ATTR_SUMMARY_PHASES: Final = "verl.summary.phases"
ATTR_SUMMARY_PHASE_SECONDS: Final = "verl.summary.phase_seconds"
ATTR_SUMMARY_PHASE_RUNS: Final = "verl.summary.phase_runs"
ATTR_SUMMARY_PHASE_TOKENS: Final = "verl.summary.phase_tokens"
#: the step span ended with an error status
ATTR_SUMMARY_ERROR: Final = "verl.summary.error"

# the OpenTelemetry semantic conventions' exception event attributes
ATTR_EXC_TYPE: Final = "exception.type"
ATTR_EXC_MESSAGE: Final = "exception.message"
ATTR_EXC_STACKTRACE: Final = "exception.stacktrace"

# Attributes on the step span
ATTR_GLOBAL_STEP: Final = "verl.global_step"
ATTR_EPOCH: Final = "verl.epoch"
ATTR_PROJECT: Final = "verl.project"
ATTR_EXPERIMENT: Final = "verl.experiment"
ATTR_TRAINER: Final = "verl.trainer"
ATTR_TRAINER_MODE: Final = "verl.trainer_mode"  # v1: sync / colocate_async / separate_async
ATTR_VERL_VERSION: Final = "verl.version"  # the installed verl's version (``verl-otel compare`` names a change)
ATTR_ROLLOUT_N: Final = "verl.rollout_n"
ATTR_BATCH_SIZE: Final = "verl.batch_size"
ATTR_PHASE: Final = "verl.phase"
ATTR_PHASE_SLOWEST: Final = "verl.slowest_phase"
ATTR_STEPS_PLANNED: Final = "verl.steps_planned"
#: On a step (and the phase it stopped in) that ended by verl's own stop signal, not an error:
#: fully_async's last fit_step finds the queue closed and raises TrainingStopException in ``gen``.
ATTR_STOPPED: Final = "verl.stopped"
# Attributes on rollout spans (docs/guides/step-traces.md)
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
# fully_async: the rollouter's parameter version, beside the traceparent in a batch's meta_info (console numbering)
PARAM_VERSION_KEY: Final = "verl_otel_param_version"
SAMPLE_SPAN_ID_KEY: Final = "verl_otel_span_id"  # our copy of a sample's trajectory: the id its engine requests named

# Spans of the training workers' calls, under the trainer's phase span (docs/guides/step-traces.md).
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
#: A training worker's side of a weight sync (verl's ``ActorRolloutRefWorker.update_weights``), under the trainer's
#: ``update_weights`` phase span, with its parts under it (attributes: semconv/why.py, "weight sync parts")
SPAN_WEIGHT_SYNC: Final = "weights.sync"
#: the model engine's per-tensor export (gather, dtype cast): the time spent pulling the weights out of it
SPAN_WEIGHT_GATHER: Final = "weights.gather"
#: what consumed the export: the checkpoint engine's bucket sends, or the colocated rollout's load (naive)
SPAN_WEIGHT_TRANSFER: Final = "weights.transfer"
#: one bucket of the transfer (only the slowest few of a sync get a span; the counts are on weights.sync)
SPAN_WEIGHT_BUCKET: Final = "weights.bucket"
#: A rollout replica's side (verl's ``CheckpointEngineWorker.update_weights``), under the same phase span: the
#: checkpoint engine's receive stream pulled, and the rollout engine loading what it yields (buckets: weights.bucket)
SPAN_WEIGHT_RECEIVE: Final = "weights.receive"
#: the time spent pulling the weights out of the checkpoint engine's receive stream (waiting for the sender's bytes)
SPAN_WEIGHT_RECEIVE_PULL: Final = "weights.receive_pull"
#: what consumed the stream: the server adapter loading the weights into the rollout engine
SPAN_WEIGHT_LOAD: Final = "weights.load"
WEIGHT_SYNC_SPANS: Final[frozenset[str]] = frozenset(
    (
        SPAN_WEIGHT_SYNC,
        SPAN_WEIGHT_GATHER,
        SPAN_WEIGHT_TRANSFER,
        SPAN_WEIGHT_BUCKET,
        SPAN_WEIGHT_RECEIVE,
        SPAN_WEIGHT_RECEIVE_PULL,
        SPAN_WEIGHT_LOAD,
    )
)
#: spans of a step's trace that are not phases
NON_PHASE_SPANS: Final[frozenset[str]] = frozenset(
    {
        SPAN_STEP,
        SPAN_FIT_END,
        SPAN_STEP_SUMMARY,
        SPAN_ROLLOUT_WORKER,
        SPAN_ROLLOUT_SAMPLE,
        SPAN_REWARD_WORKER,
        SPAN_REWARD_SCORE,
        SPAN_STALL,
        *WORKER_SPAN_NAMES.values(),
        *WEIGHT_SYNC_SPANS,
    }
)

# Resource attributes: what each process is (and of which run, where the process knows it)
RES_PROJECT: Final = ATTR_PROJECT
RES_EXPERIMENT: Final = ATTR_EXPERIMENT
RES_PROCESS_ROLE: Final = "verl.process.role"
#: the process' index within its process role, named for what it counts (a training worker's rank is ATTR_WORKER_RANK
#: on its spans): an agent-loop (rollout) worker's index, a rollout replica's rank
RES_ROLLOUT_WORKER_INDEX: Final = "verl.process.rollout_worker_index"
RES_REPLICA_INDEX: Final = "verl.process.replica_index"
#: both, before 0.1.0's rename ("worker" is a training worker): exported too for a release (CHANGELOG.md)
RES_DEPRECATED_WORKER_INDEX: Final = "verl.process.worker_index"
RES_NODE: Final = "host.name"
RES_PID: Final = "process.pid"
#: One process (the Collector's prometheus exporter makes it the series' ``instance``, as host:port is on the
#: pull path): host, role and pid, readable in Grafana's $instance list
RES_INSTANCE: Final = "service.instance.id"

#: Process roles (resource attribute values)
PROCESS_ROLE_DRIVER: Final = "driver"
PROCESS_ROLE_TRAINER: Final = "trainer"
PROCESS_ROLE_AGENT_LOOP: Final = "agent_loop_worker"
PROCESS_ROLE_REWARD: Final = "reward_worker"
PROCESS_ROLE_WORKER: Final = "train_worker"
PROCESS_ROLE_OTHER: Final = "ray_worker"
#: a standalone rollout replica's worker (verl's ``CheckpointEngineWorker``, not its LLM server): receives weights
PROCESS_ROLE_REPLICA_WORKER: Final = "replica_worker"
#: which resource key carries a process' index within its role (the others have none)
INDEX_OF_PROCESS_ROLE: Final[dict[str, str]] = {
    PROCESS_ROLE_AGENT_LOOP: RES_ROLLOUT_WORKER_INDEX,
    PROCESS_ROLE_ROLLOUT_SERVER: RES_REPLICA_INDEX,
}

# --------------------------------------------------------------------------------------------
# Async trainers (fully_async): the rollouter service, parameter versions, staleness
# --------------------------------------------------------------------------------------------
#: fully_async's FullyAsyncRollouter actor: its own service/process role.
PROCESS_ROLE_ROLLOUTER: Final = "rollouter"
#: One span per parameter-version window of the rollouter: from one parameter sync
#: (verl's ``reset_staleness``) to the next; the samples it started in that window carry its context.
SPAN_ROLLOUTER_GENERATE: Final = "rollouter.generate"
#: The rollouter's validation run (``do_validate``, called by the trainer).
SPAN_ROLLOUTER_VALIDATE: Final = "rollouter.validate"
#: Parameter (weights) version: fully_async's ``current_param_version`` (one per parameter sync); on a v1
#: step link, the oldest weights version (max_global_steps) that finished the linked samples. On v1 links
#: ATTR_GLOBAL_STEP names the step that submitted the prompts. On a sample (a fully_async rollouter's, or an
#: agent-loop sample of a v1 async trainer): the weights version that began it (min_global_steps).
ATTR_PARAM_VERSION: Final = "verl.param_version"
#: On a sample: the weights version that finished it (max_global_steps; a partial rollout, cut by a weight sync
#: and resumed on the new weights, spans versions).
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
