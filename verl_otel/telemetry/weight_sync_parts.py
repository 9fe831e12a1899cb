"""The parts of one weight sync on a training worker (verl's ``ActorRolloutRefWorker.update_weights``), timed
from the model engine's per-tensor export stream, the one thing every checkpoint engine (NCCL, NIXL, the
colocated ``naive`` load, a plugin's) consumes:

- gather: the time spent pulling each tensor out of the export (FSDP's all-gather of a shard, the dtype cast);
- transfer: the rest of the sync's time while, and after, the stream is consumed: the engine packing buckets and
  sending them (or the colocated rollout loading them);
- buckets: verl's bucketing rule (tensors fill ``bucket_size`` bytes; one that does not fit closes the bucket,
  and the engine sends it before it takes the next; a tensor larger than a bucket goes in chunks) applied to
  the stream, so each bucket's transfer is the consumer's time after the pull that closed it (the last bucket:
  after the stream ended).

Spans: ``weights.sync`` (live, so a stall inside the sync goes under it), then at its end ``weights.gather``,
``weights.transfer`` and the slowest :data:`WSYNC_BUCKET_SPANS` ``weights.bucket`` spans with their real times;
the counts go on ``weights.sync``. Per tensor only two clock reads and a few additions, no allocation."""

from __future__ import annotations

import heapq
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from verl_otel import semconv as sc
from verl_otel.telemetry.text import mark_failed


def _nbytes(item: Any) -> int:
    tensor = item[1] if isinstance(item, tuple) and len(item) == 2 else None
    try:
        return int(tensor.nbytes) if tensor is not None else 0
    except Exception:  # noqa: BLE001 - a DTensor or another type: counted as 0 bytes
        return 0


class WeightSync:
    """One sync. ``stream(...)`` wraps each export the sync pulls; ``end(exc)`` closes the span and its parts."""

    #: the sync's span, its pull part and its consumer part; the seconds attributes of the two parts
    NAMES: tuple[str, str, str] = (sc.SPAN_WEIGHT_SYNC, sc.SPAN_WEIGHT_GATHER, sc.SPAN_WEIGHT_TRANSFER)
    SECONDS: tuple[str, str] = (sc.ATTR_WSYNC_GATHER_S, sc.ATTR_WSYNC_TRANSFER_S)

    def __init__(
        self,
        tracer: trace.Tracer,
        parent: otel_context.Context,
        mode: str,
        bucket_size: int,
        step: int,
        max_text: int = 1024,
        bucket_spans: int = sc.WSYNC_BUCKET_SPANS,
    ) -> None:
        self.tracer, self.max_text = tracer, max_text
        self.bucket_size = max(1, int(bucket_size))
        self.bucket_spans = max(0, bucket_spans)
        attrs: dict[str, Any] = {sc.ATTR_WSYNC_MODE: mode, sc.ATTR_GLOBAL_STEP: step}
        self.span: Span = tracer.start_span(self.NAMES[0], context=parent, attributes=attrs)
        self.context = trace.set_span_in_context(self.span)
        self.gather_ns = self.bytes = self.tensors = 0
        self.first_pull_ns = self.last_pull_ns = 0
        self.buckets = 0  # buckets closed so far (the one being filled is number ``buckets``)
        self.filled = 0
        # the consumer's time since the last pull, and which bucket it belongs to
        self._gap_from = 0
        self._gap_bucket = 0
        self._bucket_ns: dict[int, list[int]] = {}  # bucket -> [start, end, consumer ns, bytes]
        self._ended = False

    # -- the export stream --------------------------------------------------------------------
    def stream(self, items: Any) -> Any:
        """``items`` as the consumer sees it (lazy; what it raises passes through untouched), timed."""
        if hasattr(items, "__aiter__"):
            return self._timed_async(items)
        return self._timed(items)

    def _timed(self, items: Any) -> Iterator[Any]:
        it = iter(items)
        try:
            while True:
                t0 = time.time_ns()
                try:
                    item = next(it)
                except StopIteration:
                    self._pulled(t0, None)
                    return
                self._pulled(t0, item)
                yield item
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    async def _timed_async(self, items: Any) -> AsyncIterator[Any]:
        it = items.__aiter__()
        try:
            while True:
                t0 = time.time_ns()
                try:
                    item = await it.__anext__()
                except StopAsyncIteration:
                    self._pulled(t0, None)
                    return
                self._pulled(t0, item)
                yield item
        finally:
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                await aclose()

    def _pulled(self, t0: int, item: Any) -> None:
        """One pull from ``t0`` to now: ``item``, or None when the stream ended."""
        try:
            t1 = time.time_ns()
            self.gather_ns += t1 - t0
            if not self.first_pull_ns:
                self.first_pull_ns = t0
            elif self._gap_from:
                self._consumed(self._gap_bucket, self._gap_from, t0)
            self.last_pull_ns = t1
            if item is None:
                self._gap_from, self._gap_bucket = t1, self.buckets  # the last bucket goes out after the end
                return
            nbytes = _nbytes(item)
            self.tensors += 1
            self.bytes += nbytes
            self._gap_from, self._gap_bucket = t1, self.buckets
            self._fill(nbytes)
        except Exception:  # noqa: BLE001 - telemetry never raises into the export
            pass

    def _fill(self, nbytes: int) -> None:
        """verl's rule: a tensor that does not fit closes the bucket (the consumer sends it before the next pull)."""
        size = self.bucket_size
        while nbytes > 0:
            if self.filled and self.filled + min(nbytes, size) > size:
                self.buckets += 1
                self.filled = 0
            chunk = min(nbytes, size - self.filled)
            self.filled += chunk
            slot = self._bucket_ns.get(self.buckets)
            if slot is None:
                slot = self._bucket_ns[self.buckets] = [0, 0, 0, 0]
            slot[3] += chunk
            nbytes -= chunk

    def _consumed(self, bucket: int, start: int, end: int) -> None:
        slot = self._bucket_ns.get(bucket)
        if slot is None:
            slot = self._bucket_ns[bucket] = [0, 0, 0, 0]
        if not slot[0]:
            slot[0] = start
        slot[1] = end
        slot[2] += end - start

    # -- the end ------------------------------------------------------------------------------
    def end(self, exc: BaseException | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        now = time.time_ns()
        if self._gap_from:
            self._consumed(self._gap_bucket, self._gap_from, now)
        buckets = self._bucket_ns if self.tensors else {}
        transfer_ns = sum(v[2] for v in buckets.values())
        slowest = heapq.nlargest(self.bucket_spans, buckets.items(), key=lambda kv: kv[1][2])
        if self.tensors:
            self._part(self.NAMES[1], self.first_pull_ns, self.last_pull_ns, self.gather_ns, self._sizes())
            self._part(self.NAMES[2], self.first_pull_ns, now, transfer_ns, {})
        for index, (start, stop, spent, nbytes) in sorted(slowest):
            attrs = {sc.ATTR_WSYNC_BUCKET_INDEX: index, sc.ATTR_WSYNC_BYTES: nbytes}
            self._part(sc.SPAN_WEIGHT_BUCKET, start or now, stop or now, spent, attrs)
        self.span.set_attributes(
            {
                **self._sizes(),
                sc.ATTR_WSYNC_BUCKETS: len(buckets),
                sc.ATTR_WSYNC_BUCKETS_SPANNED: len(slowest),
                sc.ATTR_WSYNC_BUCKET_SIZE: self.bucket_size,
                self.SECONDS[0]: round(self.gather_ns / 1e9, 6),
                self.SECONDS[1]: round(transfer_ns / 1e9, 6),
            }
        )
        if exc is not None:
            mark_failed(self.span, exc, self.max_text)
        self.span.end(end_time=now)

    def _sizes(self) -> dict[str, Any]:
        return {sc.ATTR_WSYNC_BYTES: self.bytes, sc.ATTR_WSYNC_TENSORS: self.tensors}

    def _part(self, name: str, start: int, end: int, spent_ns: int, attrs: dict[str, Any]) -> None:
        attrs = {**attrs, sc.ATTR_WSYNC_SECONDS: round(spent_ns / 1e9, 6)}
        span = self.tracer.start_span(name, context=self.context, attributes=attrs, start_time=start)
        span.end(end_time=max(start, end))


class WeightReceive(WeightSync):
    """A rollout replica's side (verl's ``CheckpointEngineWorker.update_weights``): the same timing applied to the
    checkpoint engine's receive stream, whose pulls wait for the sender's bytes (receive) while the server adapter's
    time between them loads the weights into the rollout engine (load); buckets by the same rule the sender used."""

    NAMES = (sc.SPAN_WEIGHT_RECEIVE, sc.SPAN_WEIGHT_RECEIVE_PULL, sc.SPAN_WEIGHT_LOAD)
    SECONDS = (sc.ATTR_WSYNC_RECEIVE_S, sc.ATTR_WSYNC_LOAD_S)
