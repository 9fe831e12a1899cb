"""A span exporter that never loses a batch to a collector that is away for a while.

``export`` (on the SDK's export thread or our flusher, never a training thread) encodes the batch once to
OTLP protobuf bytes and puts it in a bounded memory buffer; one sender thread per process sends the
buffer oldest first, and after a retryable answer (:mod:`verl_otel.export.otlp_send`) keeps the batch
and tries again with backoff (the endpoint's own delay when it gives one) until the endpoint answers.
A permanent refusal is counted (``reason="rejected"``) and warned once with the endpoint's answer.

Bounds: past ``limit_bytes`` in memory the oldest batches are written, as OTLP/JSON lines, to this
process' file under ``$VERL_OTEL_DIR/unsent/`` (:mod:`verl_otel.export.spool`: at most ``limit_bytes`` more
waiting on disk; past that a batch is dropped and counted, ``reason="buffer_full"``). The sender sends that
file first (it holds the oldest batches), a bounded chunk at a time, and cuts off what was delivered, so a long
outage heals by itself while the process runs. When the shutdown budget runs out, what is still in memory goes
to the same file (:meth:`BufferedSpanExporter.spill`); ``verl-otel push`` sends those files later, and
``slow-steps --file`` reads them.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from verl_otel import semconv as sc
from verl_otel._log import logger, warn_once
from verl_otel.export.otlp_send import OK, RETRY, Outcome, Sender
from verl_otel.export.spool import Batch, Spool, unsent_path

Drop = Callable[[str, int], None]
BACKOFF_MIN_S = 0.25
BACKOFF_MAX_S = 4.0  # a collector that comes back is reached within this
FLUSH_BACKOFF_S = 0.5  # ... and within this while fit end or exit waits for the buffer
MAX_REQUEST_BYTES = 2**20  # queued batches are sent together up to this (a Collector takes 4 MiB by default)
RETRY_AFTER_MAX_S = 30.0  # an endpoint's own delay is honoured up to this


__all__ = ["Batch", "BufferedSpanExporter", "unsent_path"]


class BufferedSpanExporter(SpanExporter):
    def __init__(self, sender: Sender, limit_bytes: int, unsent: Path, drop: Drop, tag: str = "") -> None:
        self._sender = sender
        self._tag = tag
        self._limit = max(0, limit_bytes)
        self._spool = Spool(unsent, self._limit, drop)
        self._drop = drop
        self._cond = threading.Condition()
        self._queue: deque[Batch] = deque()
        self._bytes = 0  # of the queue and the batch in flight
        self._inflight: list[Batch] | None = None  # sent together, as one request
        self._spilled_inflight = False  # the batches in flight were written to the unsent file meanwhile
        self._flushing = 0  # force_flush calls waiting now
        self._flush_seq = 0  # force_flush calls so far (wakes the sender from a backoff)
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self.delivered = 0  # spans
        self.retries = 0
        self._failing = False

    # -- SpanExporter ------------------------------------------------------------------------------
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            batch = Batch(encode_spans(spans).SerializeToString(), len(spans))
        except Exception as exc:  # noqa: BLE001 - a span the encoder refuses: counted, never raised
            warn_once("encode-spans", f"cannot encode a batch of spans ({exc!r}); dropped and counted")
            self._drop(sc.DROP_EXPORT, len(spans))
            return SpanExportResult.FAILURE
        self.add(batch)
        return SpanExportResult.SUCCESS

    def add(self, batch: Batch) -> None:
        """Queue ``batch`` for sending; the oldest beyond the memory bound go to the unsent file."""
        overflow: list[Batch] = []
        with self._cond:
            self._after_fork_locked()
            self._queue.append(batch)
            self._bytes += len(batch.data)
            while self._bytes > self._limit and len(self._queue) > 1:
                old = self._queue.popleft()
                self._bytes -= len(old.data)
                overflow.append(old)
            self._ensure_thread_locked()
            self._cond.notify_all()
        if overflow:
            self._spool.append(overflow, bounded=True)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until everything queued, on disk too, was sent (or refused), at most ``timeout_millis``."""
        deadline = time.monotonic() + max(0, timeout_millis) / 1000
        with self._cond:
            self._flushing += 1
            self._flush_seq += 1
            self._cond.notify_all()
            try:
                while self._queue or self._inflight is not None or self._spool.waiting_bytes:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(left)
            finally:
                self._flushing -= 1
        return True

    def shutdown(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._sender.close()

    # -- what it holds -----------------------------------------------------------------------------
    @property
    def waiting_on_disk(self) -> int:
        """Spans in this buffer's unsent file, not delivered yet."""
        return self._spool.spans

    @property
    def _unsent(self) -> Path:
        return self._spool.path

    def pending(self) -> tuple[int, int]:
        """(batches, bytes) waiting in memory, the one in flight included."""
        with self._cond:
            return len(self._queue) + len(self._inflight or ()), self._bytes

    def spill(self) -> int:
        """The shutdown budget ran out: what waits in memory goes to the unsent file (the batch in flight
        too: it may yet arrive, so ``push`` can send it twice, never zero times). Returns the spans this
        process left in that file."""
        with self._cond:
            batches = list(self._queue)
            if self._inflight is not None:
                batches[:0] = self._inflight
                self._spilled_inflight = True
            self._queue.clear()
            self._bytes = 0
            self._cond.notify_all()
        if batches:
            self._spool.append(batches, bounded=False)
        self._spool.compact()  # what the sender delivered from the file is not sent again by push
        return self.waiting_on_disk

    def _after_fork_locked(self) -> None:
        if self._pid != os.getpid():  # a forked child: the parent's batches and thread are not ours
            self._pid, self._thread, self._inflight = os.getpid(), None, None
            self._queue.clear()
            self._bytes = 0
            self._spool = Spool(unsent_path(self._spool.path.parent.parent, self._tag), self._limit, self._drop)

    def _ensure_thread_locked(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, name="verl-otel-span-sender", daemon=True)
            self._thread.start()

    # -- the sender thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # noqa: BLE001 - never reached; the buffer then spills at its bound
            warn_once("span-sender", f"the span sender stopped ({exc!r}); unsent spans go to {self._unsent.parent}")

    def _loop(self) -> None:
        backoff = BACKOFF_MIN_S
        while True:
            with self._cond:
                while not self._queue and not self._spool.waiting_bytes and not self._closed:
                    self._cond.wait(1.0)
                if self._closed:
                    return
                # the file holds the oldest batches (memory overflows into it): it goes first
                batches = None if self._spool.waiting_bytes else self._take_locked()
            sent = self._send_spooled() if batches is None else self._send_queued(batches)
            if sent is None:
                continue
            outcome, spans = sent
            if outcome.kind == RETRY:
                self.retries += 1
                delay = min(outcome.retry_after_s, RETRY_AFTER_MAX_S) if outcome.retry_after_s else backoff
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                self._retrying(outcome)
                with self._cond:
                    if self._flushing:
                        delay = min(delay, FLUSH_BACKOFF_S)
                    seq = self._flush_seq
                    self._cond.wait_for(lambda: self._closed or self._flush_seq != seq, timeout=delay)  # noqa: B023
                continue
            backoff = BACKOFF_MIN_S
            self._answered(spans, outcome)

    def _take_locked(self) -> list[Batch]:
        """The oldest queued batches, up to one request's size, now in flight."""
        batches = [self._queue.popleft()]
        size = len(batches[0].data)
        while self._queue and size + len(self._queue[0].data) <= MAX_REQUEST_BYTES:
            size += len(self._queue[0].data)
            batches.append(self._queue.popleft())
        self._inflight, self._spilled_inflight = batches, False
        return batches

    def _send_queued(self, batches: list[Batch]) -> tuple[Outcome, int]:
        # serialized requests concatenated are one request holding all their resource_spans (protobuf merge)
        outcome = self._send(b"".join(b.data for b in batches))
        with self._cond:
            self._inflight = None
            if outcome.kind == RETRY and not self._spilled_inflight:
                self._queue.extendleft(reversed(batches))  # oldest first: they go again before newer ones
            elif not self._spilled_inflight:
                self._bytes -= sum(len(b.data) for b in batches)
            self._cond.notify_all()
        return outcome, sum(b.spans for b in batches)

    def _send_spooled(self) -> tuple[Outcome, int] | None:
        """The head of the unsent file (read once, bounded), cut off once the endpoint took it."""
        chunk = self._spool.head_chunk()
        if chunk is None or not chunk.batches:
            if chunk is not None:  # only damaged lines
                self._spool.consumed(chunk)
            with self._cond:
                self._cond.notify_all()
            return None
        outcome = self._send(b"".join(b.data for b in chunk.batches))
        if outcome.kind != RETRY:
            self._spool.consumed(chunk)
            with self._cond:
                self._cond.notify_all()  # a force_flush may wait for the file to drain
        return outcome, sum(b.spans for b in chunk.batches)

    def _send(self, data: bytes) -> Outcome:
        try:
            return self._sender.send(data)
        except Exception as exc:  # noqa: BLE001 - an unexpected transport error: treat as the endpoint away
            return Outcome(RETRY, "error", repr(exc))

    def _retrying(self, outcome: Outcome) -> None:
        if not self._failing:
            self._failing = True
            logger.warning(
                "cannot send spans to %s (%s%s); they wait in memory (up to %.0f MB, then %s) and are sent when "
                "it answers (training is not affected)",
                self._sender.endpoint,
                outcome.reason,
                f": {outcome.detail[:200]}" if outcome.detail else "",
                self._limit / 2**20,
                self._unsent.parent,
            )

    def _answered(self, spans: int, outcome: Outcome) -> None:
        if self._failing:
            self._failing = False
            logger.info("%s answers again: the spans that waited are being sent", self._sender.endpoint)
        if outcome.kind == OK:
            self.delivered += spans - outcome.rejected
            if outcome.rejected:
                self._refused(outcome, outcome.rejected)
            return
        self._refused(outcome, spans)

    def _refused(self, outcome: Outcome, spans: int) -> None:
        self._drop(sc.DROP_REJECTED, spans)
        warn_once(
            f"span-rejected:{outcome.reason}",
            f"{self._sender.endpoint} refused spans for good ({outcome.reason}: {outcome.detail[:300]}); "
            f'they are dropped and counted in verl_otel_dropped_total{{reason="{sc.DROP_REJECTED}"}}',
        )
