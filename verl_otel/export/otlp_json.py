"""Span exporter writing OTLP/JSON, one ExportTraceServiceRequest per line: the format the OTel
Collector's file exporter writes and its ``otlpjsonfile`` receiver reads.

OTLP/JSON differs from protobuf's canonical JSON mapping: trace/span ids are hex (not base64) and
enums are integers. Every process of a run appends to the same file, under an exclusive lock on a
side file (``traces.jsonl.lock``): each request is one whole line (short writes are continued, a
failed write is cut back), and the file rotates past ``max_bytes`` into ``traces.jsonl.1`` ..
``.N-1``. The exporter runs on the SDK's export thread or our flusher, never on a training thread;
still, nothing here can block forever on a path that is not a regular file: symlinks are not
followed (``O_NOFOLLOW``) and a FIFO or device is refused (``O_NONBLOCK`` open, then ``fstat``).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import itertools
import json
import os
import stat
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict, ParseDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from verl_otel._log import warn_once

_ID_KEYS = ("traceId", "spanId", "parentSpanId")
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _hex_ids(node: Any) -> None:
    """Rewrite base64 ids to hex in place, recursively (spans and their links)."""
    if isinstance(node, dict):
        for key, val in node.items():
            if key in _ID_KEYS and isinstance(val, str) and val:
                node[key] = base64.b64decode(val).hex()
            else:
                _hex_ids(val)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


def _b64_ids(node: Any) -> None:
    """The reverse of :func:`_hex_ids` (OTLP/JSON back to protobuf's JSON mapping)."""
    if isinstance(node, dict):
        for key, val in node.items():
            if key in _ID_KEYS and isinstance(val, str) and val:
                node[key] = base64.b64encode(bytes.fromhex(val)).decode()
            else:
                _b64_ids(val)
    elif isinstance(node, list):
        for item in node:
            _b64_ids(item)


def _message_json(msg: Any) -> dict[str, Any]:
    doc = MessageToDict(msg, use_integers_for_enums=True, preserving_proto_field_name=False)
    _hex_ids(doc)
    return doc


def to_otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """Encode spans as one OTLP/JSON ExportTraceServiceRequest object."""
    return _message_json(encode_spans(spans))


def request_line(data: bytes) -> bytes:
    """An encoded ExportTraceServiceRequest as one OTLP/JSON line (the trace file's format)."""
    doc = _message_json(ExportTraceServiceRequest.FromString(data))
    return (json.dumps(doc, separators=(",", ":")) + "\n").encode()


def request_bytes(line: bytes | str) -> bytes:
    """One OTLP/JSON line back to ExportTraceServiceRequest bytes (ValueError if it is not one)."""
    doc = json.loads(line)
    if not isinstance(doc, dict):
        raise ValueError("not an OTLP/JSON request")
    _b64_ids(doc)
    return bytes(ParseDict(doc, ExportTraceServiceRequest()).SerializeToString())


def open_regular(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that never follows a symlink, never blocks on a FIFO and refuses anything but a
    regular file (OSError)."""
    fd = os.open(path, flags | _OPEN_FLAGS, mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_all(fd: int, data: bytes) -> None:
    """Write every byte (``os.write`` may write fewer); on an error the caller cuts the partial line back."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "write returned 0")
        view = view[n:]


def rotated_paths(path: Path, keep: int) -> list[Path]:
    """``path`` and its rotated files, oldest first (``path.N-1`` .. ``path.1``, ``path``)."""
    return [Path(f"{path}.{i}") for i in range(keep - 1, 0, -1)] + [path]


class OtlpJsonFileExporter(SpanExporter):
    """Append spans to ``path`` as OTLP/JSON lines. Failures are counted (``on_drop``) and reported once,
    never raised."""

    def __init__(
        self, path: Path, max_bytes: int = 256 * 2**20, keep: int = 4, on_drop: Callable[[int], None] | None = None
    ) -> None:
        self._path = Path(path)
        self._lock_path = Path(f"{path}.lock")
        self._max_bytes, self._keep = max(1, max_bytes), max(1, keep)
        self._on_drop = on_drop
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._ino: tuple[int, int] | None = None
        self._lock_fd: int | None = None

    # -- files ------------------------------------------------------------------------------------
    def _open_locked(self) -> int:
        """The current file's fd, reopened when another process rotated it away."""
        if self._lock_fd is None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd = open_regular(self._lock_path, os.O_RDWR | os.O_CREAT)  # never truncated
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            st = os.stat(self._path, follow_symlinks=False)
            current: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            current = None
        if self._fd is not None and current != self._ino:
            os.close(self._fd)
            self._fd = None
        if self._fd is None:
            self._fd = open_regular(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            st = os.fstat(self._fd)
            self._ino = (st.st_dev, st.st_ino)
        return self._fd

    def _rotate_locked(self) -> None:
        """``path`` -> ``path.1`` -> ... ; the oldest beyond ``keep`` files is removed."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        paths = rotated_paths(self._path, self._keep)  # oldest first
        if self._keep == 1:
            os.unlink(self._path)
        else:
            for older, newer in itertools.pairwise(paths):
                if os.path.lexists(newer):
                    os.replace(newer, older)
        self._fd = open_regular(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        st = os.fstat(self._fd)
        self._ino = (st.st_dev, st.st_ino)

    def _append(self, line: bytes) -> None:
        with self._lock:
            fd = self._open_locked()
            try:
                size = os.fstat(fd).st_size
                if size > 0 and size + len(line) > self._max_bytes:
                    self._rotate_locked()
                    fd, size = self._fd, 0  # type: ignore[assignment]
                try:
                    write_all(fd, line)
                except OSError:
                    os.ftruncate(fd, size)  # no half line stays behind (we hold the lock: nobody appended)
                    raise
            finally:
                if self._lock_fd is not None:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # -- SpanExporter ---------------------------------------------------------------------------------
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = (json.dumps(to_otlp_json(spans), separators=(",", ":")) + "\n").encode()
            self._append(line)
            return SpanExportResult.SUCCESS
        except Exception as exc:  # noqa: BLE001 - telemetry must never raise into training
            why = "the disk is full" if isinstance(exc, OSError) and exc.errno == errno.ENOSPC else repr(exc)
            warn_once(
                f"file-export:{self._path}",
                f"cannot write traces to {self._path} ({why}); spans are "
                'dropped and counted in verl_otel_dropped_total{reason="write_failed"}',
            )
            if self._on_drop is not None:
                self._on_drop(len(spans))
            return SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        with self._lock:
            for fd in (self._fd, self._lock_fd):
                if fd is not None:
                    with contextlib.suppress(OSError):  # already gone: nothing left to release
                        os.close(fd)
            self._fd = self._lock_fd = None
