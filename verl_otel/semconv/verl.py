"""verl's own vocabulary, as verl-otel reads it: timer names, metric keys, exception names and per-sample
fields, each mapped to our phase or attribute. What changes when verl renames something."""

from __future__ import annotations

from typing import Final

from verl_otel.semconv.spans import (
    PHASE_ADV,
    PHASE_OLD_LOG_PROB,
    PHASE_PARAM_SYNC,
    PHASE_REF,
    PHASE_REWARD,
    PHASE_ROLLOUT,
    PHASE_SAVE_CHECKPOINT,
    PHASE_UPDATE_ACTOR,
    PHASE_UPDATE_CRITIC,
    PHASE_UPDATE_WEIGHTS,
    PHASE_VALIDATE,
    PHASE_VALUES,
)

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
    "timing_s/param_sync": PHASE_PARAM_SYNC,
}
#: verl's timer around the whole step (the root span is opened by our fit/step hook instead).
VERL_TIMER_STEP: Final = "step"

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

#: verl's per-sample timings (AgentLoopMetrics field -> attribute)
SAMPLE_TIMING_ATTRS: Final[dict[str, str]] = {
    "generate_sequences": "verl.sample.generate_s",
    "tool_calls": "verl.sample.tool_calls_s",
    "compute_score": "verl.sample.compute_score_s",
    "num_preempted": "verl.sample.preemptions",
}
