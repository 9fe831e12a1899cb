"""verl hooks: where verl's functions are wrapped. Each module lists its targets as data
(:class:`~verl_otel.hooks.registry.HookTarget`); :data:`ALL_TARGETS` is every one of them."""

from __future__ import annotations

from verl_otel.hooks.async_rollout import ASYNC_ROLLOUT_TARGETS
from verl_otel.hooks.registry import HookTarget
from verl_otel.hooks.reward import REWARD_TARGETS
from verl_otel.hooks.rollout import ROLLOUT_TARGETS
from verl_otel.hooks.trainer import TRAINER_TARGETS
from verl_otel.hooks.update import UPDATE_TARGETS
from verl_otel.hooks.worker_group import WORKER_GROUP_TARGETS

ALL_TARGETS: tuple[HookTarget, ...] = (*TRAINER_TARGETS, *ROLLOUT_TARGETS, *UPDATE_TARGETS,
                                       *WORKER_GROUP_TARGETS, *REWARD_TARGETS, *ASYNC_ROLLOUT_TARGETS)
