"""Parse OTLP/JSON: the embedded default's traces.jsonl (one ExportTraceServiceRequest per line, as
the OTel Collector's file exporter writes) and Jaeger's /api/v3 responses (the same under ``result``).
Malformed lines are skipped and counted, never raised."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from verl_otel.analysis.model import Span

_ERROR = 2  # Status.code ERROR


def value(v: dict[str, Any]) -> Any:
    """An OTLP AnyValue (int64 may come as a decimal string)."""
    if not isinstance(v, dict):
        return None
    if "intValue" in v:
        return int(v["intValue"])
    for key in ("stringValue", "doubleValue", "boolValue"):
        if key in v:
            return v[key]
    if "arrayValue" in v:
        return [value(x) for x in v["arrayValue"].get("values", [])]
    return None


def attributes(items: Iterable[dict[str, Any]] | None) -> dict[str, Any]:
    return {a["key"]: value(a.get("value", {})) for a in items or [] if isinstance(a, dict) and "key" in a}


def spans_from_request(doc: dict[str, Any]) -> Iterator[Span]:
    for rs in doc.get("resourceSpans", []) or []:
        res = attributes(rs.get("resource", {}).get("attributes"))
        service = str(res.get("service.name", ""))
        for ss in rs.get("scopeSpans", []) or []:
            for sp in ss.get("spans", []) or []:
                yield Span(
                    trace_id=str(sp["traceId"]).lower(),
                    span_id=str(sp["spanId"]).lower(),
                    parent_id=str(sp.get("parentSpanId", "") or "").lower(),
                    name=str(sp["name"]),
                    start_ns=int(sp["startTimeUnixNano"]),
                    end_ns=int(sp["endTimeUnixNano"]),
                    attributes=attributes(sp.get("attributes")),
                    error=(sp.get("status") or {}).get("code") in (_ERROR, "STATUS_CODE_ERROR"),
                    service=service,
                )


def read_file(path: Path) -> tuple[list[Span], int]:
    """(spans, number of malformed lines) of a traces.jsonl file."""
    import json

    spans: list[Span] = []
    bad = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                spans.extend(list(spans_from_request(json.loads(line))))  # a bad line adds nothing
            except (ValueError, KeyError, TypeError, AttributeError):
                bad += 1
    return spans, bad
