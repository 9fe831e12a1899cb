"""Spans of a reward-loop worker's per-sample ``compute_score`` calls, in the trainer's trace.

Agent-loop workers call the reward loop once per sample, so spanning every call would grow with
the batch. As for rollout samples, this process keeps per trainer span (the traceparent that came
with the calls) the count and only the K slowest calls, emitted as a ``reward.worker`` span from the
first call to the last, with the slowest ``reward.compute_score`` spans under it. This process cannot see
a rollout or step end: the trainer tells it when a step ended (hooks/reward_emit.py); a group no call
came for in ``idle_s`` is emitted too (trainers that do not tell).
"""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.telemetry.propagation import extract
from verl_otel.telemetry.slowest_calls import Group, SlowestCalls, emit_group


class RewardSpans(SlowestCalls):
    """Reward-loop calls: a ``reward.worker`` span per group, its slowest calls under it."""

    def _emit(self, parent: str, group: Group) -> None:
        attrs = {
            sc.ATTR_REWARD_CALLS: group.calls,
            sc.ATTR_REWARD_CALLS_SPANNED: len(group.slowest),
            sc.ATTR_REWARD_ERRORS: group.errors,
        }
        emit_group(
            self.services,
            sc.SPAN_REWARD_WORKER,
            extract(parent),
            attrs,
            group.first_ns,
            group.last_ns,
            sc.SPAN_REWARD_SCORE,
            (call for _, _, call in group.slowest),
            group.errors,
            "reward calls",
        )
