"""One span buffer's file of batches that wait on disk (``$VERL_OTEL_DIR/unsent/``, OTLP/JSON lines, oldest
first): written when the memory part is full (bounded) or at shutdown (not bounded), and read back by the
buffer's sender thread, a bounded chunk at a time from the head, while the process runs.

What was delivered is cut off the head: the sender only advances ``head`` (the bytes delivered); the file is
rewritten without them (temporary file, then ``os.replace``: a crash leaves the old or the new file, never half
of one) once they are half of it, removed when all of it was delivered, and compacted at shutdown, so
``verl-otel push`` finds only what is still unsent. A process killed between a delivery and the cut sends
those lines again with ``push``: twice, never zero times.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from verl_otel import config as cfg
from verl_otel import semconv as sc
from verl_otel._log import warn_once
from verl_otel.export.otlp_json import open_regular, request_bytes, request_line, write_all

Drop = Callable[[str, int], None]
READ_BYTES = 2**20  # the sender reads about this much of the file at a time (at least one whole line)


@dataclass
class Batch:
    data: bytes  # one ExportTraceServiceRequest
    spans: int


@dataclass
class Chunk:
    """Whole lines at the file's head, read back for one request."""

    batches: list[Batch] = field(default_factory=list)
    nbytes: int = 0  # of the file they take (the lines that did not parse included)
    damaged: int = 0  # lines that did not parse


def unsent_path(data_dir: Path, tag: str = "") -> Path:
    """This process' file of spans that wait for ``verl-otel push`` (``tag``: one file per buffer, so two
    buffers of a process never append to the same file)."""
    return data_dir / sc.UNSENT_DIR / f"spans-{cfg.hostname()}-{os.getpid()}{tag}.jsonl"


def span_count(data: bytes) -> int:
    req = ExportTraceServiceRequest.FromString(data)
    return sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)


class Spool:
    def __init__(self, path: Path, limit_bytes: int, drop: Drop) -> None:
        self.path = path
        self._limit = max(0, limit_bytes)
        self._drop = drop
        self._lock = threading.Lock()
        self._size = 0  # bytes of the file (it is ours alone: one file per process and buffer)
        self._head = 0  # bytes at its head already delivered
        self._chunk: Chunk | None = None  # the head, read once and sent until the endpoint takes it
        self._owned = False  # the file at ``path`` was made by this spool
        self.spans = 0  # spans in the file not delivered yet

    @property
    def waiting_bytes(self) -> int:
        return self._size - self._head

    # -- writing ------------------------------------------------------------------------------------
    def append(self, batches: list[Batch], bounded: bool) -> None:
        """Append ``batches``; ``bounded``: at most ``limit_bytes`` waiting while the process runs (past it
        the batch is dropped and counted). Never raises (a failed write is counted)."""
        with self._lock:
            fd, handled = None, 0
            try:
                for batch in batches:
                    line = request_line(batch.data)
                    if bounded and self.waiting_bytes + len(line) > self._limit:
                        handled += batch.spans
                        self._drop(sc.DROP_BUFFER_FULL, batch.spans)
                        warn_once(
                            "span-buffer-full",
                            f"the span buffer is full (VERL_OTEL_EXPORT_BUFFER_MB={self._limit / 2**20:g} in memory "
                            f"and again on disk): the oldest spans in memory are dropped and counted in "
                            f'verl_otel_dropped_total{{reason="{sc.DROP_BUFFER_FULL}"}}',
                        )
                        continue
                    if fd is None:
                        fd = self._open_locked()
                    write_all(fd, line)
                    self._size += len(line)
                    self.spans += batch.spans
                    handled += batch.spans
            except Exception as exc:  # noqa: BLE001 - disk full, not a regular file: counted, never raised
                lost = sum(b.spans for b in batches) - handled
                warn_once("unsent-write", f"cannot write unsent spans to {self.path} ({exc!r}); dropped and counted")
                self._drop(sc.DROP_WRITE, max(0, lost))
            finally:
                if fd is not None:
                    os.close(fd)

    def _open_locked(self) -> int:
        if not self._owned:  # a file of an earlier process with this pid is left to push, not appended to
            self._owned = True
            base, n = self.path, 0
            while os.path.lexists(self.path):
                n += 1
                self.path = base.with_name(f"{base.stem}-{n}{base.suffix}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        return open_regular(self.path, flags)

    # -- reading back (the sender thread only) --------------------------------------------------------
    def head_chunk(self) -> Chunk | None:
        """The oldest lines not delivered, about ``READ_BYTES`` of them; None when nothing waits."""
        with self._lock:
            if self.waiting_bytes <= 0:
                return None
            if self._chunk is None:
                try:
                    self._chunk = self._read_locked()
                except Exception as exc:  # noqa: BLE001 - removed or replaced under us (push ran): not ours now
                    warn_once("unsent-read", f"cannot read back {self.path} ({exc!r}); left to verl-otel push")
                    self._size = self._head = self.spans = 0
                    return None
            return self._chunk

    def _read_locked(self) -> Chunk:
        chunk = Chunk()
        fd = open_regular(self.path, os.O_RDONLY)
        try:
            buf, pos = b"", self._head
            while pos < self._size and (len(buf) < READ_BYTES or b"\n" not in buf):
                data = os.pread(fd, min(READ_BYTES, self._size - pos), pos)
                if not data:
                    break
                buf, pos = buf + data, pos + len(data)
        finally:
            os.close(fd)
        end = buf.rfind(b"\n") + 1 or len(buf)  # whole lines (the last one too: the file is ours)
        for line in buf[:end].splitlines(keepends=True):
            chunk.nbytes += len(line)
            try:
                data = request_bytes(line)
                chunk.batches.append(Batch(data, span_count(data)))
            except Exception:  # noqa: BLE001 - a damaged line: skipped, counted by the caller
                chunk.damaged += 1
        if not chunk.nbytes:
            raise OSError(f"{self.path} is shorter than what was written to it")
        return chunk

    def consumed(self, chunk: Chunk) -> None:
        """``chunk`` was delivered (or refused for good): cut it off the head."""
        with self._lock:
            if chunk is not self._chunk:
                return
            self._chunk = None
            if chunk.damaged:  # a line that does not parse (cut by a crash): skipped, counted
                self._drop(sc.DROP_WRITE, chunk.damaged)
            self._head += chunk.nbytes
            self.spans = max(0, self.spans - sum(b.spans for b in chunk.batches))
            if self._head >= self._size or 2 * self._head >= self._size:
                self._compact_locked()

    def compact(self) -> None:
        """Cut what was delivered off the file now (shutdown: ``push`` must not send it again)."""
        with self._lock:
            if self._head:
                self._compact_locked()

    def _compact_locked(self) -> None:
        try:
            if self._head >= self._size:
                os.unlink(self.path)
            else:
                tmp = self.path.with_name(self.path.name + ".tmp")  # not *.jsonl: push never reads it
                fd = open_regular(self.path, os.O_RDONLY)
                out = open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                try:
                    pos = self._head
                    while pos < self._size:
                        data = os.pread(fd, min(READ_BYTES, self._size - pos), pos)
                        if not data:
                            break
                        write_all(out, data)
                        pos += len(data)
                finally:
                    os.close(fd)
                    os.close(out)
                os.replace(tmp, self.path)
            self._size -= self._head
            self._head = 0
        except Exception as exc:  # noqa: BLE001 - the delivered lines stay; push may send them again
            warn_once("unsent-compact", f"cannot cut delivered spans off {self.path} ({exc!r})")
