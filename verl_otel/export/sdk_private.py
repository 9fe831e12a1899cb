"""The one place verl-otel reads the OpenTelemetry SDK's private fields: nothing public tells how full a
``BatchSpanProcessor``'s queue is, and a span that finds it full is dropped by the SDK without a count.
tests/test_log_and_sdk.py fails when the installed SDK (or the floor's, in `make test-min`) changes them; here,
a change degrades to "not counted", never to an error."""

from __future__ import annotations

from collections.abc import Sized
from typing import Any


def span_queue(processor: Any) -> tuple[Sized, int] | None:
    """(queue, its limit) of a ``BatchSpanProcessor``, or None when this SDK keeps them elsewhere. SDK >= 1.35
    keeps them in a helper (``_batch_processor._queue``, ``._max_queue_size``); older ones on the processor
    (``queue``, ``max_queue_size``)."""
    inner = getattr(processor, "_batch_processor", processor)
    queue = getattr(inner, "_queue", None)
    if queue is None:
        queue = getattr(inner, "queue", None)
    limit = getattr(inner, "_max_queue_size", None)
    if limit is None:
        limit = getattr(inner, "max_queue_size", None)
    if not isinstance(queue, Sized) or not isinstance(limit, int):
        return None
    return queue, limit
