"""Why a step was slow, one level deeper (issue 28): the tokens a step and each phase handled and the time
per 1k tokens, the rollout's long tail (slowest sample against the median sample), a straggling rank."""

from __future__ import annotations

from typing import Final

from verl_otel.semconv.metric_def import (
    LABEL_GPU,
    LABEL_METHOD,
    LABEL_PHASE,
    LABEL_RANK,
    LABEL_ROLE,
    LABEL_ROLLOUT_WORKER,
    RENAMED_WORKER,
    MetricDef,
)
from verl_otel.semconv.spans import (
    PHASE_OLD_LOG_PROB,
    PHASE_REF,
    PHASE_REWARD,
    PHASE_ROLLOUT,
    PHASE_UPDATE_ACTOR,
    PHASE_UPDATE_CRITIC,
    PHASE_VALUES,
)

# -- tokens ------------------------------------------------------------------------------------
#: On the step span: the training batch's prompt and response tokens (sums of its attention mask, once a step).
ATTR_STEP_PROMPT_TOKENS: Final = "verl.step.prompt_tokens"
ATTR_STEP_RESPONSE_TOKENS: Final = "verl.step.response_tokens"
#: On a phase span that processes tokens: the tokens it handled and its seconds per 1k of them.
ATTR_PHASE_TOKENS: Final = "verl.phase.tokens"
ATTR_PHASE_S_PER_1K_TOKENS: Final = "verl.phase.seconds_per_1k_tokens"
#: The phases that process the batch's tokens; rollout's are the tokens it generated (responses), the
#: others read prompt and response tokens.
GENERATING_PHASES: Final[frozenset[str]] = frozenset((PHASE_ROLLOUT,))
TOKEN_PHASES: Final[frozenset[str]] = frozenset(
    (PHASE_ROLLOUT, PHASE_REWARD, PHASE_OLD_LOG_PROB, PHASE_REF, PHASE_VALUES, PHASE_UPDATE_ACTOR, PHASE_UPDATE_CRITIC)
)

PHASE_S_PER_1K_TOKENS: Final = MetricDef(
    "verl_phase_seconds_per_1k_tokens",
    "gauge",
    "Seconds per 1000 tokens of the last training step's phase (rollout: tokens generated; the others: prompt "
    "and response tokens of the batch).",
    (LABEL_PHASE,),
    unit="",  # seconds per 1k tokens: no OTel unit translates to this name's suffix
)

# -- the rollout's long tail -------------------------------------------------------------------
#: On ``rollout.worker``: the median and slowest sample of the worker's batch (all its samples, not only those
#: with a span).
ATTR_WORKER_SAMPLE_MEDIAN_S: Final = "verl.rollout.sample_median_s"
ATTR_WORKER_SAMPLE_MAX_S: Final = "verl.rollout.sample_max_s"
#: On ``rollout.worker``: its slowest sample ÷ its median sample (1: no tail). The trainer never sees the samples'
#: times, so the step's own ratio (the slowest sample of all workers ÷ their median) is slow-steps' reading.
ATTR_WORKER_TAIL_RATIO: Final = "verl.rollout.tail_ratio"
ROLLOUT_TAIL_RATIO: Final = MetricDef(
    "verl_rollout_tail_ratio",
    "gauge",
    "The last training batch's slowest sample over its median sample, per agent-loop worker (1: no tail).",
    (LABEL_ROLLOUT_WORKER,),
    unit="",
    renamed=RENAMED_WORKER,
)

# -- straggling ranks ---------------------------------------------------------------------------
WORKER_CALL_SECONDS: Final = MetricDef(
    "verl_worker_call_seconds",
    "gauge",
    "Seconds of this rank's last traced training-worker call (worker.* span), per method and role: ranks of one "
    "method that differ show a straggler.",
    (LABEL_METHOD, LABEL_ROLE, LABEL_RANK),
    unit="s",
)
#: Prometheus recording rule: each rank's last call over the median rank's, per run, method and role.
RECORD_RANK_SLOWDOWN: Final = "verl:worker_rank_slowdown:ratio"
RECORDED: Final[tuple[str, ...]] = (RECORD_RANK_SLOWDOWN,)

# -- weight sync parts -------------------------------------------------------------------------
#: On ``weights.sync``: verl's effective checkpoint-engine backend (naive: the colocated rollout loads the export)
ATTR_WSYNC_MODE: Final = "verl.weight_sync.mode"
#: On ``weights.sync`` and ``weights.gather``: the bytes and tensors the model engine exported
ATTR_WSYNC_BYTES: Final = "verl.weight_sync.bytes"
ATTR_WSYNC_TENSORS: Final = "verl.weight_sync.tensors"
#: On ``weights.sync``: buckets (verl's rule: tensors fill update_weights_bucket_megabytes, a larger one goes in
#: chunks), how many got a span, the bucket size
ATTR_WSYNC_BUCKETS: Final = "verl.weight_sync.buckets"
ATTR_WSYNC_BUCKETS_SPANNED: Final = "verl.weight_sync.buckets_spanned"
ATTR_WSYNC_BUCKET_SIZE: Final = "verl.weight_sync.bucket_size_bytes"
#: On ``weights.sync``: seconds of each part (the gather and the transfer interleave: a span's length is not its
#: part's time) and of the sync
ATTR_WSYNC_GATHER_S: Final = "verl.weight_sync.gather_s"
ATTR_WSYNC_TRANSFER_S: Final = "verl.weight_sync.transfer_s"
#: On ``weights.receive`` (a replica's side; its bytes, tensors and buckets are the keys above): seconds pulling
#: from the checkpoint engine's receive stream, and seconds the rollout engine spent loading what it yielded
ATTR_WSYNC_RECEIVE_S: Final = "verl.weight_sync.receive_s"
ATTR_WSYNC_LOAD_S: Final = "verl.weight_sync.load_s"
#: On each part span: its own seconds; on ``weights.bucket``: its index and bytes too
ATTR_WSYNC_SECONDS: Final = "verl.weight_sync.seconds"
ATTR_WSYNC_BUCKET_INDEX: Final = "verl.weight_sync.bucket"
#: At most this many ``weights.bucket`` spans per sync: the slowest (a 70B model has thousands of buckets)
WSYNC_BUCKET_SPANS: Final = 4
#: Attribute set on verl's training-worker object: (traceparent, global step) of the last traced call it ran, the
#: step trace its next weight sync belongs to (verl's update_weights call carries no context)
WORKER_STEP_TRACE_ATTR: Final = "_verl_otel_step_trace"

# -- memory --------------------------------------------------------------------------------------
#: every instrumented process that exports metrics; its role is the target's verl_process_role label
PROCESS_RESIDENT_MEMORY: Final = MetricDef(
    "verl_process_resident_memory_bytes",
    "gauge",
    "Resident memory of this process (read every few seconds off the training threads).",
    unit="By",
)

# -- GPUs (NVML, where nvidia-ml-py and a GPU are there: export/gpu_sampler.py) ----------------------------------
#: a training worker's or rollout replica's own GPUs (CUDA_VISIBLE_DEVICES), read off the training threads
GPU_UTILIZATION: Final = MetricDef(
    "verl_gpu_utilization_ratio",
    "gauge",
    "Share of the last sample period in which a kernel ran on this GPU (NVML), per GPU this process sees.",
    (LABEL_GPU,),
    unit="",
)
GPU_MEMORY_USED: Final = MetricDef(
    "verl_gpu_memory_used_bytes",
    "gauge",
    "GPU memory in use on this GPU (NVML; every process on it), per GPU this process sees.",
    (LABEL_GPU,),
    unit="By",
)
GPU_MEMORY_TOTAL: Final = MetricDef(
    "verl_gpu_memory_total_bytes",
    "gauge",
    "GPU memory of this GPU (NVML), per GPU this process sees.",
    (LABEL_GPU,),
    unit="By",
)

WHY_METRICS: Final[tuple[MetricDef, ...]] = (
    PHASE_S_PER_1K_TOKENS,
    ROLLOUT_TAIL_RATIO,
    WORKER_CALL_SECONDS,
    PROCESS_RESIDENT_MEMORY,
    GPU_UTILIZATION,
    GPU_MEMORY_USED,
    GPU_MEMORY_TOTAL,
)
