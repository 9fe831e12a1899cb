"""Spans of a reward-loop worker's per-sample ``compute_score`` calls, in the trainer's trace.

Agent-loop workers call the reward loop once per sample, so spanning every call would grow with
the batch. As for rollout samples, this process keeps per trainer span (the traceparent that came
with the calls) the count and only the K slowest calls, emitted as a ``reward.worker`` span from the
first call to the last, with the slowest ``reward.compute_score`` spans under it. This process cannot see
a rollout or step end: the trainer tells it when a step ended (hooks/reward_flush.py); a group no call
came for in ``idle_s`` is emitted too (trainers that do not tell).
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from verl_otel import runtime
from verl_otel import semconv as sc
from verl_otel.telemetry.propagation import extract
from verl_otel.telemetry.slowest_calls import Group, SlowestCalls
from verl_otel.telemetry.text import mark_failed


class RewardSpans(SlowestCalls):
    """Reward-loop calls: a ``reward.worker`` span per group, its slowest calls under it."""

    def _emit(self, parent: str, group: Group) -> None:
        tracer = runtime.current().tracer
        calls = sorted(group.slowest, key=lambda k: k[2].start_ns)
        ws = tracer.start_span(sc.SPAN_REWARD_WORKER, context=extract(parent), start_time=group.first_ns, attributes={
            sc.ATTR_REWARD_CALLS: group.calls, sc.ATTR_REWARD_CALLS_SPANNED: len(calls),
            sc.ATTR_REWARD_ERRORS: group.errors})
        ctx = trace.set_span_in_context(ws)
        for _, _, call in calls:
            sp = tracer.start_span(sc.SPAN_REWARD_SCORE, context=ctx, attributes=call.attributes,
                                   start_time=call.start_ns)
            if call.error is not None:
                mark_failed(sp, call.error, runtime.current().settings.max_text)
            sp.end(end_time=call.end_ns)
        if group.errors:
            ws.set_status(Status(StatusCode.ERROR, f"{group.errors} reward calls failed"))
        ws.end(end_time=group.last_ns)
