"""The Jaeger client against Jaeger's real response shapes (shared/fixtures/jaeger), served by a local
HTTP server: v3, legacy fallback, "No traces found", many nested traces, garbage, unreachable."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from otlp_receiver import free_port

from verl_otel.analysis.jaeger import JaegerClient, JaegerError
from verl_otel.analysis.model import build_steps
from verl_otel.analysis.slow_steps import rank

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "jaeger"  # ../shared beside the checkout


class FakeJaeger:
    """Routes -> (status, body); records the queries it got."""

    def __init__(self, routes: dict[str, tuple[int, bytes]]) -> None:
        self.routes = routes
        self.queries: list[tuple[str, dict[str, list[str]]]] = []
        self.port = free_port()
        jaeger = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                url = urlparse(self.path)
                jaeger.queries.append((url.path, parse_qs(url.query)))
                status, body = jaeger.routes.get(url.path, (404, b"404 page not found\n"))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def jaeger():
    made = []

    def make(routes):
        made.append(FakeJaeger(routes))
        return made[-1]

    yield make
    for j in made:
        j.close()


def _otlp_span(trace: int, span: int, parent: int | None, name: str, start_s: float, dur_s: float,
               attrs: dict[str, Any]) -> dict[str, Any]:
    def val(v):
        return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": str(v)}

    return {"traceId": f"{trace:032x}", "spanId": f"{span:016x}", "parentSpanId": f"{parent:016x}" if parent else "",
            "name": name, "kind": 1, "startTimeUnixNano": str(int(start_s * 1e9)),
            "endTimeUnixNano": str(int((start_s + dur_s) * 1e9)), "status": {},
            "attributes": [{"key": k, "value": val(v)} for k, v in attrs.items()]}


def many_steps(n: int, slow_step: int) -> list[dict[str, Any]]:
    """n step traces, nested rollout.worker/rollout.sample children; update_actor of slow_step 3.4x."""
    spans = []
    t = 1_800_000_000.0
    for step in range(1, n + 1):
        tid, sid = step, step * 100
        actor = 1.0 * (3.4 if step == slow_step else 1.0)
        phases = [("rollout", 2.0), ("old_log_prob", 0.5), ("update_actor", actor)]
        total = sum(d for _, d in phases)
        spans.append(_otlp_span(tid, sid, None, "step", t, total, {"verl.global_step": step}))
        off = t
        for i, (name, dur) in enumerate(phases):
            spans.append(_otlp_span(tid, sid + i + 1, sid, name, off, dur, {"verl.phase": name}))
            if name == "rollout":
                spans.append(_otlp_span(tid, sid + 10, sid + 1, "rollout.worker", off, dur, {"verl.rollout.worker": 0}))
                for k in range(3):
                    spans.append(_otlp_span(tid, sid + 20 + k, sid + 10, "rollout.sample", off, 0.1 * (k + 1),
                                            {"verl.sample.index": k}))
            off += dur
        t += total + 1
    return spans


def v3_body(spans: list[dict[str, Any]]) -> bytes:
    return json.dumps({"result": {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "verl"}}]}, "scopeSpans": [{"scope": {}, "spans": spans}]}]}}
    ).encode()


def legacy_body(spans: list[dict[str, Any]]) -> bytes:
    traces: dict[str, dict[str, Any]] = {}
    for s in spans:
        tr = traces.setdefault(s["traceId"], {"traceID": s["traceId"], "spans": [],
                                              "processes": {"p1": {"serviceName": "verl", "tags": []}}})
        start_us = int(s["startTimeUnixNano"]) // 1000
        tr["spans"].append({
            "traceID": s["traceId"], "spanID": s["spanId"], "operationName": s["name"],
            "references": [{"refType": "CHILD_OF", "traceID": s["traceId"], "spanID": s["parentSpanId"]}]
            if s["parentSpanId"] else [],
            "startTime": start_us, "duration": int(s["endTimeUnixNano"]) // 1000 - start_us,
            "tags": [{"key": a["key"], "type": "int64" if "intValue" in a["value"] else "string",
                      "value": int(a["value"]["intValue"]) if "intValue" in a["value"] else a["value"]["stringValue"]}
                     for a in s["attributes"]],
            "logs": [], "processID": "p1", "warnings": None})
    return json.dumps({"data": list(traces.values()), "total": 0, "limit": 0, "offset": 0, "errors": None}).encode()


WINDOW = (1_700_000_000 * 10**9, 1_900_000_000 * 10**9)


def test_real_v3_fixture_shape_parses(jaeger):
    j = jaeger({"/api/v3/traces": (200, (FIXTURES / "api_v3_find_traces.json").read_bytes())})
    spans = JaegerClient(j.url).find_steps("verl", *WINDOW)
    assert [(s.name, s.trace_id, s.span_id, s.error) for s in spans] == [
        ("foobar", "000000000000009600000000000000a0", "00000000000000b4", True)]
    path, q = j.queries[0]
    assert path == "/api/v3/traces" and q["query.operation_name"] == ["step"] and q["query.service_name"] == ["verl"]
    assert q["query.start_time_min"][0].endswith("Z")


def test_real_legacy_fixture_shape_parses_via_fallback(jaeger):
    j = jaeger({"/api/traces": (200, (FIXTURES / "api_traces_v1_search.json").read_bytes())})
    spans = JaegerClient(j.url).find_steps("verl", *WINDOW)
    (s,) = spans
    assert s.name == "okey-dokey-0" and s.parent_id == "909541b92cf05311" and s.service == "telemetrygen"
    assert s.end_ns - s.start_ns == 123_000 and s.attributes["peer.service"] == "telemetrygen-client"
    assert [p for p, _ in j.queries] == ["/api/v3/traces", "/api/traces"]


@pytest.mark.parametrize("shape", ["v3", "legacy"])
def test_many_nested_traces_rank_the_slow_step(jaeger, shape):
    spans = many_steps(200, slow_step=137)
    route = {"/api/v3/traces": (200, v3_body(spans))} if shape == "v3" else {"/api/traces": (200, legacy_body(spans))}
    j = jaeger(route)
    steps = build_steps(JaegerClient(j.url).find_steps("verl", *WINDOW))
    assert len(steps) == 200
    (top,) = rank(steps, 1)
    assert top.step.global_step == 137 and top.phase == "update_actor" and top.ratio == pytest.approx(3.4)
    assert [s.index for s in top.step.samples] == [2, 1, 0]


def test_no_traces_found_is_empty_not_an_error(jaeger):
    j = jaeger({"/api/v3/traces": (404, b'{"error":{"code":404,"message":"No traces found"}}')})
    assert JaegerClient(j.url).find_steps("verl", *WINDOW) == []
    assert len(j.queries) == 1


def test_garbage_is_a_clear_error(jaeger):
    j = jaeger({"/api/v3/traces": (200, b"<html>proxy login</html>")})
    with pytest.raises(JaegerError, match="not JSON"):
        JaegerClient(j.url).find_steps("verl", *WINDOW)
    j2 = jaeger({"/api/v3/traces": (200, b'{"result": {"resourceSpans": [{"scopeSpans": [{"spans": [{}]}]}]}}')})
    with pytest.raises(JaegerError, match="unexpected"):
        JaegerClient(j2.url).find_steps("verl", *WINDOW)
    j3 = jaeger({"/api/v3/traces": (500, b"internal")})
    with pytest.raises(JaegerError, match="HTTP 500"):
        JaegerClient(j3.url).find_steps("verl", *WINDOW)


def test_unreachable_jaeger_is_a_clear_error():
    with pytest.raises(JaegerError, match="cannot reach Jaeger"):
        JaegerClient(f"http://127.0.0.1:{free_port()}", timeout_s=2).find_steps("verl", *WINDOW)
