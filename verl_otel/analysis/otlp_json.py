"""Parse OTLP/JSON: the embedded default's traces.jsonl (one ExportTraceServiceRequest per line, as
the OTel Collector's file exporter writes it) and Jaeger's /api/v3 answers (the same under ``result``).
A malformed line of a file is skipped and counted, never raised."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from verl_otel.analysis.step_traces import Event, Link, Span

_STATUS_ERROR = (2, "2", "STATUS_CODE_ERROR")
_HEX = frozenset("0123456789abcdef")
#: What a malformed document raises while being read (RecursionError: absurdly deep JSON).
MALFORMED = (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError)


class MalformedError(ValueError):
    """A document that is not OTLP/JSON trace data."""


def hex_id(raw: Any, nbytes: int) -> str:
    """Lowercase hex id. OTLP/JSON says hex; protobuf's own JSON mapping (MessageToDict) gives base64."""
    text = str(raw or "").strip().lower()
    if not text:
        return ""
    if len(text) <= 2 * nbytes and set(text) <= _HEX:
        return text.rjust(2 * nbytes, "0")
    try:
        decoded = base64.b64decode(str(raw), validate=True)
    except (binascii.Error, ValueError):
        raise MalformedError(f"id {raw!r} is neither hex nor base64") from None
    if len(decoded) != nbytes:
        raise MalformedError(f"id {raw!r} is not {nbytes} bytes")
    return decoded.hex()


def value(v: Any) -> Any:
    """An OTLP AnyValue as a Python value (int64 may come as a decimal string, doubles as "NaN")."""
    if not isinstance(v, dict):
        return None
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        return [value(x) for x in (v["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in v:
        return attributes((v["kvlistValue"] or {}).get("values"))
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def attributes(items: Any) -> dict[str, Any]:
    return {a["key"]: value(a.get("value")) for a in items or [] if isinstance(a, dict) and "key" in a}


def _ns(raw: Any) -> int:
    n = int(raw)
    if n < 0:
        raise MalformedError(f"negative time {raw!r}")
    return n


def spans_from_request(doc: Any) -> Iterator[Span]:
    """The spans of one ExportTraceServiceRequest, or of a Jaeger /api/v3 answer (``{"result": ...}``).
    Raises one of :data:`MALFORMED` on anything else."""
    if not isinstance(doc, dict):
        raise MalformedError(f"expected an object, got {type(doc).__name__}")
    if "result" in doc and "resourceSpans" not in doc:
        doc = doc["result"] or {}
        if not isinstance(doc, dict):
            raise MalformedError("'result' is not an object")
    for rs in doc.get("resourceSpans") or []:
        res = attributes((rs.get("resource") or {}).get("attributes"))
        service = str(res.get("service.name") or "")
        for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
            for sp in ss.get("spans") or []:
                trace_id, span_id = hex_id(sp["traceId"], 16), hex_id(sp["spanId"], 8)
                if not trace_id or not span_id:
                    raise MalformedError("a span without traceId or spanId")
                yield Span(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_id=hex_id(sp.get("parentSpanId"), 8),
                    name=str(sp["name"]),
                    start_ns=_ns(sp["startTimeUnixNano"]),
                    end_ns=_ns(sp["endTimeUnixNano"]),
                    attributes=attributes(sp.get("attributes")),
                    status_error=(sp.get("status") or {}).get("code") in _STATUS_ERROR,
                    service=service,
                    events=tuple(
                        Event(
                            str(e.get("name") or ""), _ns(e.get("timeUnixNano") or 0), attributes(e.get("attributes"))
                        )
                        for e in sp.get("events") or []
                    ),
                    links=tuple(_link(ln) for ln in sp.get("links") or []),
                    resource=res,
                )


def _link(raw: Any) -> Link:
    trace_id, span_id = hex_id(raw["traceId"], 16), hex_id(raw["spanId"], 8)
    if not trace_id or not span_id:
        raise MalformedError("a link without traceId or spanId")
    return Link(trace_id, span_id, attributes(raw.get("attributes")))


def parse_request(doc: Any) -> list[Span]:
    """All spans of one document, or one of :data:`MALFORMED` (nothing half-read)."""
    return list(spans_from_request(doc))


@dataclass
class FileRead:
    spans: list[Span] = field(default_factory=list)
    malformed: int = 0  # lines skipped
    older: int = 0  # spans dropped for starting before min_start_ns


def rotated_set(path: Path | str) -> list[Path]:
    """``traces.jsonl`` and the files it rotated into (``traces.jsonl.1`` newest .. ``.N`` oldest),
    oldest first. Only ``path`` itself must exist."""
    path = Path(path)
    older = []
    for sibling in path.parent.glob(path.name + ".*"):
        suffix = sibling.name[len(path.name) + 1 :]
        if suffix.isdigit():
            older.append((int(suffix), sibling))
    return [p for _, p in sorted(older, reverse=True)] + [path]


def read_file(path: Path | str, min_start_ns: int = 0, keep: Callable[[Span], Span | None] | None = None) -> FileRead:
    """The spans of a traces.jsonl file and its rotated files. Spans starting before ``min_start_ns``
    are dropped while reading (a step starts before its children, so none of them belongs to a step in
    the window): a long run's files need not fit in memory. ``keep``: what of each span to hold (the span, a
    smaller copy, or None: not needed), so a reader holds only what its command needs. Raises OSError only
    for ``path`` itself."""
    out = FileRead()
    for span in iter_file(path, min_start_ns, out):
        kept = span if keep is None else keep(span)
        if kept is not None:
            out.spans.append(kept)
    return out


def iter_file(
    path: Path | str,
    min_start_ns: int = 0,
    out: FileRead | None = None,
    containing: bytes | None = None,
    skip: Callable[[bytes], bool] | None = None,
) -> Iterator[Span]:
    """The spans of the file set, streamed line by line (oldest file first), counting what is skipped into
    ``out``; with ``containing``, only the lines holding those bytes are parsed; lines ``skip`` accepts are
    not parsed."""
    out = out if out is not None else FileRead()
    for part in rotated_set(path):
        try:
            f = open(part, "rb")  # noqa: SIM115 - closed below; only the open may raise FileNotFoundError
        except FileNotFoundError:
            if part == Path(path):
                raise  # a rotated file removed while reading is fine; the file asked for is not
            continue
        with f:
            yield from _read_one(f, min_start_ns, out, containing, skip)


def _read_one(
    f: IO[bytes], min_start_ns: int, out: FileRead, containing: bytes | None, skip: Callable[[bytes], bool] | None
) -> Iterator[Span]:
    for raw in f:
        if not raw.strip() or (containing is not None and containing not in raw) or (skip and skip(raw)):
            continue
        try:
            spans = parse_request(json.loads(raw))
        except MALFORMED:
            out.malformed += 1
            continue
        for span in spans:
            if span.start_ns >= min_start_ns:
                yield span
            else:
                out.older += 1
