"""Spans of the training workers' calls (``worker.update_actor`` ...) under the trainer's phase span.

One span per call per rank, so a straggling rank shows in Jaeger as a longer bar among its
siblings. Only calls whose batch carries the trainer's traceparent get a span: the context is taken
out of the batch first, so verl's code never sees it and nested calls (update_actor ->
train_mini_batch in the same process) do not span twice.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import Span

from verl_otel import runtime
from verl_otel import semconv as sc
from verl_otel.telemetry.propagation import extract, take
from verl_otel.telemetry.text import mark_failed


def batch_size(batch: Any) -> int | None:
    for probe in (lambda b: len(b), lambda b: int(b.shape[0]), lambda b: len(b.keys)):
        try:
            return int(probe(batch))
        except Exception:  # noqa: BLE001 - each batch type knows its size differently
            continue
    return None


class WorkerSpan:
    """``with WorkerSpan(method, role, rank, batch):`` around one worker call."""

    def __init__(self, method: str, role: str, rank: int, batch: Any) -> None:
        self.span: Span | None = None
        traceparent = take(batch) if batch is not None else None
        name = sc.WORKER_SPAN_NAMES.get(method)
        if traceparent is None or name is None:
            return
        attrs: dict[str, Any] = {sc.ATTR_WORKER_METHOD: method, sc.ATTR_WORKER_ROLE: role,
                                 sc.ATTR_WORKER_RANK: rank}
        size = batch_size(batch)
        if size is not None:
            attrs[sc.ATTR_WORKER_BATCH] = size
        self.span = runtime.current().tracer.start_span(name, context=extract(traceparent), attributes=attrs)

    def __enter__(self) -> WorkerSpan:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self.span is None:
            return
        try:
            if exc is not None:
                mark_failed(self.span, exc, runtime.current().settings.max_text)
            self.span.end()
            runtime.current().flush_soon()
        except Exception:  # noqa: BLE001 - telemetry never raises into training
            pass
