"""Read the embedded default's traces.jsonl in tests (through the CLI's own parser)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any


def load_spans(path: Path) -> list[dict[str, Any]]:
    """Spans as flat dicts: name, trace_id, span_id, parent_id, attributes, error, resource."""
    import json

    from verl_otel.analysis.otlp_json import rotated_set

    spans = []
    lines = [line for part in rotated_set(path) for line in part.read_text().splitlines()]
    for line in lines:
        doc = json.loads(line)
        for rs in doc.get("resourceSpans", []):
            res = {a["key"]: _val(a["value"]) for a in rs.get("resource", {}).get("attributes", [])}
            for ss in rs.get("scopeSpans", []):
                for sp in ss.get("spans", []):
                    spans.append({
                        "name": sp["name"],
                        "trace_id": sp["traceId"],
                        "span_id": sp["spanId"],
                        "parent_id": sp.get("parentSpanId", ""),
                        "attributes": {a["key"]: _val(a["value"]) for a in sp.get("attributes", [])},
                        "error": sp.get("status", {}).get("code") == 2,
                        "events": [e.get("name") for e in sp.get("events", [])],
                        "start": int(sp["startTimeUnixNano"]),
                        "end": int(sp["endTimeUnixNano"]),
                        "resource": res,
                    })
    return spans


def _val(v: dict[str, Any]) -> Any:
    if "intValue" in v:
        return int(v["intValue"])
    for key in ("stringValue", "doubleValue", "boolValue"):
        if key in v:
            return v[key]
    return None


def steps(spans: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """global step -> {"root": span, "children": [span names under it, any depth]}."""
    by_trace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for sp in spans:
        by_trace[sp["trace_id"]].append(sp)
    out = {}
    for trace in by_trace.values():
        roots = [s for s in trace if s["name"] == "step" and not s["parent_id"]]
        if len(roots) != 1:
            continue
        root = roots[0]
        out[root["attributes"]["verl.global_step"]] = {"root": root, "spans": trace}
    return out


def parent_chain(span: dict[str, Any], spans: list[dict[str, Any]]) -> list[str]:
    by_id = {s["span_id"]: s for s in spans}
    chain = [span["name"]]
    cur = span
    while cur.get("parent_id"):
        cur = by_id.get(cur["parent_id"])
        if cur is None:
            chain.append("<missing>")
            break
        chain.append(cur["name"])
    return chain
