"""Spans of the training workers' calls (``worker.update_actor`` ...) under the trainer's phase span.

One span per call per rank, so a straggling rank shows in Jaeger as a longer bar among its
siblings. Only calls whose batch carries the trainer's traceparent get a span: the context is taken
out of the batch first, so verl's code never sees it and nested calls (update_actor ->
train_mini_batch in the same process) do not span twice.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.trace import Span

from verl_otel import semconv as sc
from verl_otel.telemetry.propagation import extract
from verl_otel.telemetry.services import Services
from verl_otel.telemetry.text import mark_failed


class WorkerSpan:
    """``with WorkerSpan(method, role, rank, traceparent, size):`` around one worker call; a no-op without
    the trainer's ``traceparent`` (the hooks take it out of verl's batch, with the batch's ``size``)."""

    def __init__(
        self,
        services: Services,
        method: str,
        role: str,
        rank: int,
        traceparent: str | None,
        size: int | None,
        step: int = -1,
    ) -> None:
        self.services = services
        self.span: Span | None = None
        self.watch: int | None = None
        self.labels = (method, role, str(rank))
        self.start = time.monotonic()
        name = sc.WORKER_SPAN_NAMES.get(method)
        if traceparent is None or name is None:
            return
        attrs: dict[str, Any] = {sc.ATTR_WORKER_METHOD: method, sc.ATTR_WORKER_ROLE: role, sc.ATTR_WORKER_RANK: rank}
        if size is not None:
            attrs[sc.ATTR_WORKER_BATCH] = size
        self.span = services.tracer().start_span(name, context=extract(traceparent), attributes=attrs)
        stalls = services.stalls()
        if stalls is not None:
            phase = sc.WORKER_METHOD_PHASES.get(method, method)
            self.watch = stalls.enter(phase, call=name, step=step, parent=self.span)

    def __enter__(self) -> WorkerSpan:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self.span is None:
            return
        try:
            if self.watch is not None:
                stalls = self.services.stalls()
                if stalls is not None:
                    stalls.exit(self.watch)
            if exc is not None:
                mark_failed(self.span, exc, self.services.settings.max_text)
            self.span.end()
            if exc is None:  # each rank's last call: the straggler rule compares the ranks (dashboards/)
                self.services.store.set(sc.WORKER_CALL_SECONDS, self.labels, time.monotonic() - self.start)
            self.services.flush_soon()
        except Exception:  # noqa: BLE001 - telemetry never raises into training
            pass
