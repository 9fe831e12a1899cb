"""Span exporter writing OTLP/JSON, one ExportTraceServiceRequest per line: the format the OTel
Collector's file exporter writes and its ``otlpjsonfile`` receiver reads.

OTLP/JSON differs from protobuf's canonical JSON mapping: trace/span ids are hex (not base64) and
enums are integers. Every process of a run appends to the same file: each request is written with
a single ``write`` on an O_APPEND descriptor under an exclusive lock, so lines never interleave.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from verl_otel._log import warn_once

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


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


def to_otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """Encode spans as one OTLP/JSON ExportTraceServiceRequest object."""
    msg = encode_spans(spans)
    doc = MessageToDict(msg, use_integers_for_enums=True, preserving_proto_field_name=False)
    _hex_ids(doc)
    return doc


class OtlpJsonFileExporter(SpanExporter):
    """Append spans to ``path`` as OTLP/JSON lines. Failures are reported once, never raised."""

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self._fd

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = (json.dumps(to_otlp_json(spans), separators=(",", ":")) + "\n").encode()
            with self._lock:
                fd = self._open()
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    os.write(fd, line)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            return SpanExportResult.SUCCESS
        except Exception as exc:  # noqa: BLE001 - telemetry must never raise into training
            warn_once(f"file-export:{self._path}", f"cannot write traces to {self._path}: {exc}; spans are dropped")
            return SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
