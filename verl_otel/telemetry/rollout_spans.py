"""Spans of an agent-loop worker's batch: ``rollout.worker`` under the trainer's rollout/validate
span (its W3C traceparent travels in the batch), and ``rollout.sample`` spans for the slowest
samples only (VERL_OTEL_SAMPLE_SPANS per worker per batch, chosen when the batch is done), so the
long tail is always visible and the span volume does not grow with the batch size."""

from __future__ import annotations

import threading
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from verl_otel import runtime
from verl_otel import semconv as sc
from verl_otel.telemetry.engine_context import preset_span_id
from verl_otel.telemetry.propagation import extract
from verl_otel.telemetry.rollout import Batch, FinishedSample
from verl_otel.telemetry.text import mark_failed
from verl_otel.telemetry.values import to_scalar


def _tokens(output: Any) -> tuple[int | None, int | None]:
    """(prompt, response) token counts of verl's padded per-sample output."""
    try:
        mask = output.attention_mask
        plen = output.prompt_ids.shape[-1]
        return int(mask[..., :plen].sum()), int(mask[..., plen:].sum())
    except Exception:  # noqa: BLE001 - other verl versions, other shapes
        try:
            return len(output.prompt_ids), len(output.response_ids)
        except Exception:  # noqa: BLE001
            return None, None


def sample_attributes(sample: FinishedSample) -> dict[str, Any]:
    traj = sample.trajectory or {}
    attrs: dict[str, Any] = {}
    for key, attr in (("step", sc.ATTR_GLOBAL_STEP), ("sample_index", sc.ATTR_SAMPLE_INDEX),
                      ("rollout_n", sc.ATTR_SAMPLE_ROLLOUT_N)):
        if traj.get(key) is not None:
            try:
                attrs[attr] = int(traj[key])
            except (TypeError, ValueError):
                pass
    out = sample.output
    if out is None:
        return attrs
    prompt, response = _tokens(out)
    if prompt is not None:
        attrs[sc.ATTR_SAMPLE_PROMPT_TOKENS] = prompt
    if response is not None:
        attrs[sc.ATTR_SAMPLE_RESPONSE_TOKENS] = response
    turns = getattr(out, "num_turns", None)
    if isinstance(turns, int):
        attrs[sc.ATTR_SAMPLE_TURNS] = turns
    extra = getattr(out, "extra_fields", None) or {}
    for key in ("num_tool_calls", "tool_calls"):
        if isinstance(extra.get(key), int):
            attrs[sc.ATTR_SAMPLE_TOOL_CALLS] = extra[key]
            break
    score, _ = to_scalar(getattr(out, "reward_score", None))
    if score is not None:
        attrs[sc.ATTR_SAMPLE_SCORE] = score
    metrics = getattr(out, "metrics", None)
    for field, attr in sc.SAMPLE_TIMING_ATTRS.items():
        val, _ = to_scalar(getattr(metrics, field, None) if metrics is not None else None)
        if val is not None and val >= 0:
            attrs[attr] = int(val) if field == "num_preempted" else val
    return attrs


def emit_batch(worker: int | None, batch: Batch, max_sample_spans: int) -> None:
    tel = runtime.current()
    parent = extract(batch.parent)
    slowest = sorted(batch.finished, key=lambda s: s.seconds, reverse=True)[:max_sample_spans]
    attrs = {
        sc.ATTR_MODE: batch.mode,
        sc.ATTR_GLOBAL_STEP: batch.step,
        sc.ATTR_SAMPLES: len(batch.finished),
        sc.ATTR_SAMPLES_SPANNED: len(slowest),
    }
    if worker is not None:
        attrs[sc.ATTR_WORKER_INDEX] = worker
    ws = tel.tracer.start_span(sc.SPAN_ROLLOUT_WORKER, context=parent, attributes=attrs, start_time=batch.start_ns)
    wctx = trace.set_span_in_context(ws)
    for sample in slowest:
        with preset_span_id((sample.trajectory or {}).get(sc.SAMPLE_SPAN_ID_KEY)):
            sp = tel.tracer.start_span(sc.SPAN_ROLLOUT_SAMPLE, context=wctx, attributes=sample_attributes(sample),
                                       start_time=sample.start_ns)
        if sample.error is not None:
            mark_failed(sp, sample.error, runtime.current().settings.max_text)
        sp.end(end_time=sample.end_ns)
    errors = sum(1 for s in batch.finished if s.error is not None)
    if errors:
        ws.set_status(Status(StatusCode.ERROR, f"{errors} samples failed"))
    ws.end(end_time=time.time_ns())
    tel.flush_soon()


class BatchSpans:
    """Emits a worker's finished batches. A batch dispatched outside any trainer step has no parent yet
    (the async trainers' warm-up prompts, submitted before step 1 opens): it waits for the next batch
    that has one, the step its samples feed, and joins that trace, whether or not it finished before
    that batch arrived (the outcome must not depend on how loaded the machine is). One that no parent
    reaches within ``orphan_wait_s`` is emitted as a root of its own."""

    def __init__(self, max_sample_spans: int, orphan_wait_s: float = 120.0) -> None:
        self.max_sample_spans, self.orphan_wait_s = max_sample_spans, orphan_wait_s
        self._lock = threading.Lock()
        self._orphans: list[tuple[float, int | None, Batch]] = []

    def done(self, worker: int | None, batch: Batch) -> None:
        if batch.parent is None:
            with self._lock:
                self._orphans.append((time.monotonic(), worker, batch))
            return
        self.adopt(batch.mode, batch.parent)
        emit_batch(worker, batch, self.max_sample_spans)

    def adopt(self, mode: str, parent: str) -> None:
        """A batch of ``mode`` with a parent arrived: the waiting batches of that mode join its trace."""
        with self._lock:
            orphans = [o for o in self._orphans if o[2].mode == mode]
            self._orphans = [o for o in self._orphans if o[2].mode != mode]
        for _, worker, batch in orphans:
            batch.parent = parent
            emit_batch(worker, batch, self.max_sample_spans)

    def expire(self) -> None:
        """On the flusher's tick: orphans that waited too long become roots."""
        now = time.monotonic()
        with self._lock:
            old = [o for o in self._orphans if now - o[0] >= self.orphan_wait_s]
            self._orphans = [o for o in self._orphans if now - o[0] < self.orphan_wait_s]
        for _, worker, batch in old:
            emit_batch(worker, batch, self.max_sample_spans)
