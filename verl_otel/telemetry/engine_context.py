"""The sample's context for the inference engine's request span (vLLM's ``llm_request``).

``rollout.sample`` spans are made when a worker's batch is done, for its slowest samples only, but the
engine needs the sample's span id when the request starts. So a sample that talks to the engine gets its
span id up front (:func:`sample_context`: 64 random bits and a string, no OTel call), the request carries
``traceparent(step trace, that id)`` and, if the sample is one of the slowest, its span is made with that
id (:class:`PresetIds` on our tracer provider), so the engine's span is its child. Only samples of a
sampled trace carry a context; the engine's spans of the samples that get no span of their own keep that
parent id (they stay in the step's trace, under a parent that is not exported).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

_local = threading.local()
_rand = random  # ids, not secrets: the module generator (reseeded in a forked child)


def sample_context(parent: str | None) -> tuple[str, int] | None:
    """``(traceparent, span id)`` for a sample of the batch whose trainer context is ``parent``; None when
    there is no parent or its trace is not sampled (flags without the sampled bit)."""
    if not parent or len(parent) != 55:
        return None
    version, trace_id, _span, flags = parent[:2], parent[3:35], parent[36:52], parent[53:55]
    try:
        if version != "00" or not int(flags, 16) & 1 or not int(trace_id, 16):
            return None
    except ValueError:
        return None
    span_id = _rand.getrandbits(64) or 1
    return f"00-{trace_id}-{span_id:016x}-01", span_id


def unsampled_traceparent() -> str:
    """A context whose trace is not sampled: an engine request started outside any sampled sample makes no
    span under a parent-based sampler (vLLM's default) instead of a root span of its own."""
    return f"00-{_rand.getrandbits(128) or 1:032x}-{_rand.getrandbits(64) or 1:016x}-00"


@contextmanager
def preset_span_id(span_id: int | None) -> Iterator[None]:
    """The next span this thread starts on a tracer with :class:`PresetIds` gets ``span_id``."""
    _local.span_id = span_id
    try:
        yield
    finally:
        _local.span_id = None


class PresetIds(RandomIdGenerator):
    """Random ids, except a span id set by :func:`preset_span_id` (used once)."""

    def generate_span_id(self) -> int:
        preset = getattr(_local, "span_id", None)
        if preset:
            _local.span_id = None
            return int(preset)
        return super().generate_span_id()
