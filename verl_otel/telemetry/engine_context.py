"""The sample's context for the inference engine's request span (vLLM's ``llm_request``).

``rollout.sample`` spans are made when a worker's batch is done, for its slowest samples only, but the
engine needs the sample's span id when the request starts. So a sample that talks to the engine gets its
span id up front (:func:`sample_context`: 64 random bits and a string, no OTel call), the request carries
``traceparent(step trace, that id)`` and, if the sample is one of the slowest, its span is made with that
id (``runtime.preset_span_id``, our tracer provider's id generator), so the engine's span is its child.
Only samples of a sampled trace carry a context; the engine's spans of the samples that get no span of
their own keep that parent id (they stay in the step's trace, under a parent that is not exported).
"""

from __future__ import annotations

import random

from verl_otel.telemetry.propagation import SEP

_rand = random  # ids, not secrets: the module generator (reseeded in a forked child)


def sample_context(parent: str | None) -> tuple[str, int] | None:
    """``(traceparent, span id)`` for a sample of the batch whose trainer context is ``parent``; None when
    there is no parent or its trace is not sampled (flags without the sampled bit)."""
    head, sep, rest = (parent or "").partition(SEP)  # the traceparent, then tracestate/baggage (propagation.py)
    if len(head) != 55:
        return None
    version, trace_id, _span, flags = head[:2], head[3:35], head[36:52], head[53:55]
    try:
        if version != "00" or not int(flags, 16) & 1 or not int(trace_id, 16):
            return None
    except ValueError:
        return None
    span_id = _rand.getrandbits(64) or 1
    return f"00-{trace_id}-{span_id:016x}-01{sep}{rest}", span_id
