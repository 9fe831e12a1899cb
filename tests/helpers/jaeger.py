"""A local Jaeger query service for the client and CLI tests: a real HTTP server answering with Jaeger's real
response shapes (shared/fixtures/jaeger), and synthetic step traces in the v3 (OTLP/JSON) and legacy shapes."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from verl_otel import semconv as sc
from verl_otel.native import ports

FIXTURES = Path("/work/shared/fixtures/jaeger")
if not FIXTURES.is_dir():  # ../shared beside the checkout
    FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "jaeger"

Reply = tuple[int, bytes] | tuple[int, bytes, str]
Route = Reply | Callable[[str, dict[str, list[str]]], Reply]
NOT_FOUND_ROUTE: Reply = (404, b"404 page not found\n", "text/plain; charset=utf-8")
NO_TRACES: Reply = (404, b'{"error":{"httpCode":404,"message":"No traces found"}}\n', "text/plain; charset=utf-8")


class FakeJaeger:
    """A real HTTP server on 127.0.0.1 (port 0). ``routes``: exact path, or a prefix ending in "/",
    -> (status, body[, content type]) or a function of (path, query). Records the requests it got."""

    def __init__(self, routes: dict[str, Route]) -> None:
        self.routes = routes
        self.queries: list[tuple[str, dict[str, list[str]]]] = []
        jaeger = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = parse_qs(url.query)
                jaeger.queries.append((url.path, query))
                prefixed = (r for p, r in jaeger.routes.items() if p.endswith("/") and url.path.startswith(p))
                reply = jaeger.routes.get(url.path) or next(prefixed, NOT_FOUND_ROUTE)
                if callable(reply):
                    reply = reply(url.path, query)
                status, body, ctype = (*reply, "application/json")[:3]
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def paths(self) -> list[str]:
        return [p for p, _ in self.queries]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> int:
    """A port nobody listens on (free now, outside the ephemeral range, so no outgoing connection takes it)."""
    return ports.free_port()


# -- synthetic step traces, the shape verl-otel writes, in both Jaeger shapes --------------------------
def _attr(k: str, v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"key": k, "value": {"boolValue": v}}
    if isinstance(v, int):
        return {"key": k, "value": {"intValue": str(v)}}  # int64 as a string, as OTLP/JSON writes it
    if isinstance(v, float):
        return {"key": k, "value": {"doubleValue": v}}
    return {"key": k, "value": {"stringValue": str(v)}}


def _otlp_span(
    trace: int,
    span: int,
    parent: int | None,
    name: str,
    start_s: float,
    dur_s: float,
    attrs: dict[str, Any],
    error: bool = False,
) -> dict[str, Any]:
    return {
        "traceId": f"{trace:032x}",
        "spanId": f"{span:016x}",
        "parentSpanId": f"{parent:016x}" if parent else "",
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(int(start_s * 1e9)),
        "endTimeUnixNano": str(int((start_s + dur_s) * 1e9)),
        "status": {"code": 2} if error else {},
        "attributes": [_attr(k, v) for k, v in attrs.items()],
    }


def many_steps(n: int, slow_step: int, factor: float = 3.4, t0: float = 1_800_000_000.0) -> list[dict[str, Any]]:
    """n step traces (OTLP/JSON spans): phases under the step, rollout.worker/rollout.sample nested under
    rollout; update_actor of ``slow_step`` takes ``factor`` times as long."""
    spans = []
    t = t0
    for step in range(1, n + 1):
        tid, sid = 0xABC000 + step, step * 1000
        phases = [
            (sc.PHASE_ROLLOUT, 2.0),
            (sc.PHASE_OLD_LOG_PROB, 0.5),
            (sc.PHASE_UPDATE_ACTOR, factor if step == slow_step else 1.0),
        ]
        total = sum(d for _, d in phases)
        spans.append(
            _otlp_span(
                tid,
                sid,
                None,
                sc.SPAN_STEP,
                t,
                total,
                {sc.ATTR_GLOBAL_STEP: step, sc.ATTR_TRAINER: "v1", "verl.score_mean": 0.5},
            )
        )
        off = t
        for i, (name, dur) in enumerate(phases):
            spans.append(
                _otlp_span(tid, sid + i + 1, sid, name, off, dur, {sc.ATTR_PHASE: name, sc.ATTR_GLOBAL_STEP: step})
            )
            if name == sc.PHASE_ROLLOUT:
                for w in range(2):
                    wid = sid + 10 + w
                    spans.append(
                        _otlp_span(
                            tid,
                            wid,
                            sid + 1,
                            sc.SPAN_ROLLOUT_WORKER,
                            off,
                            dur,
                            {sc.ATTR_WORKER_INDEX: w, sc.ATTR_MODE: "train"},
                        )
                    )
                    for k in range(3):
                        idx = w * 3 + k
                        spans.append(
                            _otlp_span(
                                tid,
                                sid + 100 + idx,
                                wid,
                                sc.SPAN_ROLLOUT_SAMPLE,
                                off,
                                0.1 * (idx + 1),
                                {
                                    sc.ATTR_SAMPLE_INDEX: idx,
                                    sc.ATTR_GLOBAL_STEP: step,
                                    "verl.sample.generate_s": 0.05 * (idx + 1),
                                },
                                error=idx == 0,
                            )
                        )
            off += dur
        t += total + 1
    return spans


def v3_body(spans: list[dict[str, Any]], service: str = "verl") -> bytes:
    return json.dumps(
        {
            "result": {
                "resourceSpans": [
                    {
                        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                        "scopeSpans": [{"scope": {}, "spans": spans}],
                    }
                ]
            }
        }
    ).encode()


def legacy_body(spans: list[dict[str, Any]], service: str = "verl") -> bytes:
    """The same spans as the legacy /api/traces answer: µs, CHILD_OF references, typed tags, processes."""

    def tag(a: dict[str, Any]) -> dict[str, Any]:
        ((kind, v),) = a["value"].items()
        typ = {"intValue": "int64", "doubleValue": "float64", "boolValue": "bool"}.get(kind, "string")
        return {"key": a["key"], "type": typ, "value": int(v) if kind == "intValue" else v}

    traces: dict[str, dict[str, Any]] = {}
    for s in spans:
        tr = traces.setdefault(
            s["traceId"],
            {
                "traceID": s["traceId"],
                "spans": [],
                "warnings": None,
                "processes": {"p1": {"serviceName": service, "tags": []}},
            },
        )
        start_us = int(s["startTimeUnixNano"]) // 1000
        tags = [tag(a) for a in s["attributes"]] + (
            [{"key": "error", "type": "bool", "value": True}] if s["status"].get("code") == 2 else []
        )
        tr["spans"].append(
            {
                "traceID": s["traceId"],
                "spanID": s["spanId"],
                "operationName": s["name"],
                "references": [{"refType": "CHILD_OF", "traceID": s["traceId"], "spanID": s["parentSpanId"]}]
                if s["parentSpanId"]
                else [],
                "startTime": start_us,
                "duration": int(s["endTimeUnixNano"]) // 1000 - start_us,
                "tags": tags,
                "logs": [],
                "processID": "p1",
                "warnings": None,
            }
        )
    return json.dumps({"data": list(traces.values()), "total": 0, "limit": 0, "offset": 0, "errors": None}).encode()


class Storage:
    """A Jaeger search over fixed traces (OTLP/JSON spans, e.g. :func:`many_steps`), as FakeJaeger routes that
    honour the query as Jaeger does: the traces holding a span named the operation that started in the window, at
    most the limit of them, newest started first, oldest first or shuffled (storages differ). ``answers`` holds
    each answer's trace count."""

    def __init__(self, spans: list[dict[str, Any]], order: str = "newest", seed: int = 0) -> None:
        import random

        self.traces: dict[str, list[dict[str, Any]]] = {}
        for s in spans:
            self.traces.setdefault(s["traceId"], []).append(s)
        self.order, self.random = order, random.Random(seed)
        self.answers: list[int] = []

    def _find(self, op: str, lo_ns: int, hi_ns: int, limit: int) -> list[dict[str, Any]]:
        hits = []
        for spans in self.traces.values():
            starts = [int(s["startTimeUnixNano"]) for s in spans if s["name"] == op]
            if any(lo_ns <= t <= hi_ns for t in starts):
                hits.append((min(starts), spans))
        hits.sort(key=lambda h: h[0], reverse=self.order == "newest")
        if self.order == "shuffled":
            self.random.shuffle(hits)
        picked = hits[:limit]
        self.answers.append(len(picked))
        return [s for _, spans in picked for s in spans]

    def v3(self, path: str, q: dict[str, list[str]]) -> Reply:
        from datetime import datetime

        def ns(text: str) -> int:  # RFC3339 with nanoseconds (Python's fromisoformat stops at µs)
            head, frac = text.rstrip("Z").split(".")
            return int(datetime.fromisoformat(head + "+00:00").timestamp()) * 10**9 + int(frac.ljust(9, "0"))

        lo, hi = ns(q["query.start_time_min"][0]), ns(q["query.start_time_max"][0])
        found = self._find(q["query.operation_name"][0], lo, hi, int(q["query.num_traces"][0]))
        return (200, v3_body(found)) if found else NO_TRACES

    def legacy(self, path: str, q: dict[str, list[str]]) -> Reply:
        lo, hi = int(q["start"][0]) * 1000, int(q["end"][0]) * 1000
        return 200, legacy_body(self._find(q["operation"][0], lo, hi, int(q["limit"][0])))
