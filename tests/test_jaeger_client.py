"""The Jaeger client against Jaeger's real response shapes (/work/shared/fixtures/jaeger), served by a real
local HTTP server: v3, legacy, v3 missing -> legacy, "No traces found", 200 nested step traces in both
shapes, garbage, HTTP errors, connection refused, timeouts."""

from __future__ import annotations

import socket
from datetime import datetime

import pytest

from helpers.jaeger import FIXTURES, NO_TRACES, closed_port, legacy_body, many_steps, v3_body

from verl_otel import semconv as sc
from verl_otel.analysis.jaeger import JaegerClient, JaegerError, rfc3339, trace_link
from verl_otel.analysis.slow_steps import rank
from verl_otel.analysis.step_traces import build_steps

WINDOW = (1_700_000_000 * 10**9 + 123_456_789, 1_900_000_000 * 10**9)


# -- the real fixtures --------------------------------------------------------------------------------
def test_real_v3_fixture_shape_and_query(jaeger):
    j = jaeger({"/api/v3/traces": (200, (FIXTURES / "api_v3_find_traces.json").read_bytes())})
    client = JaegerClient(j.url)
    spans = client.find_steps("verl", *WINDOW, limit=50)
    assert [(s.name, s.trace_id, s.span_id, s.parent_id, s.status_error) for s in spans] == [
        ("foobar", "000000000000009600000000000000a0", "00000000000000b4", "", True)
    ]
    assert spans[0].start_ns == 11651379494838206464 and client.api == "v3"
    ((path, q),) = j.queries
    assert path == "/api/v3/traces"
    assert q["query.service_name"] == ["verl"] and q["query.operation_name"] == ["step"]
    assert q["query.num_traces"] == ["50"]
    # RFC3339 with nanoseconds, as Jaeger parses it (time.RFC3339Nano), round-trips to the window
    lo = q["query.start_time_min"][0]
    assert lo == "2023-11-14T22:13:20.123456789Z"
    assert datetime.fromisoformat(q["query.start_time_max"][0].replace("Z", "+00:00")).timestamp() == 1_900_000_000


def test_real_legacy_fixture_shape_via_fallback(jaeger):
    j = jaeger({"/api/traces": (200, (FIXTURES / "api_traces_v1_search.json").read_bytes())})
    client = JaegerClient(j.url)
    (s,) = client.find_steps("verl", *WINDOW, limit=20)
    assert (s.name, s.trace_id, s.span_id, s.parent_id) == (
        "okey-dokey-0",
        "83a9efd15c1c98a977e0711cc93ee28b",
        "e127af99e3b3e074",
        "909541b92cf05311",
    )
    assert s.service == "telemetrygen" and s.start_ns == 1706678909209712_000 and s.end_ns - s.start_ns == 123_000
    assert s.attributes["peer.service"] == "telemetrygen-client" and not s.status_error
    assert j.paths == ["/api/v3/traces", "/api/traces"] and client.api == "legacy"
    q = j.queries[1][1]
    assert q == {
        "service": ["verl"],
        "operation": ["step"],
        "start": [str(WINDOW[0] // 1000)],
        "end": [str(WINDOW[1] // 1000)],
        "limit": ["20"],
    }


def test_old_jaeger_ui_catch_all_means_v3_absent(jaeger):
    """Older Jaeger answers unknown paths with the UI's index.html (200): that is 'no v3', not garbage."""
    j = jaeger(
        {
            "/api/v3/traces": (200, b"<!doctype html><html>jaeger ui</html>", "text/html; charset=utf-8"),
            "/api/traces": (200, legacy_body(many_steps(3, slow_step=2))),
        }
    )
    client = JaegerClient(j.url)
    assert len(build_steps(client.find_steps("verl", *WINDOW))) == 3 and client.api == "legacy"


# -- many nested traces, both shapes ----------------------------------------------------------------------
@pytest.mark.parametrize("shape", ["v3", "legacy"])
def test_200_nested_traces_rank_the_slow_step(jaeger, shape):
    spans = many_steps(200, slow_step=137)
    route = {"/api/v3/traces": (200, v3_body(spans))} if shape == "v3" else {"/api/traces": (200, legacy_body(spans))}
    j = jaeger(route)
    got = JaegerClient(j.url).find_steps("verl", *WINDOW)
    assert len(got) == len(spans) == 200 * 12
    steps = build_steps(got)
    assert [s.global_step for s in steps] == list(range(1, 201))
    st = steps[136]
    assert st.global_step == 137 and st.seconds == pytest.approx(5.9) and st.service == "verl"
    assert st.phases == pytest.approx({"rollout": 2.0, "old_log_prob": 0.5, "update_actor": 3.4})
    assert [(s.index, s.worker) for s in st.samples[:3]] == [(5, 1), (4, 1), (3, 1)]
    assert st.samples[-1].index == 0 and st.samples[-1].error
    (top,) = rank(steps, 1).verdicts
    assert top.step.global_step == 137 and top.cause is not None
    assert top.cause.phase == "update_actor" and top.cause.ratio == pytest.approx(3.4)
    sample_span = next(s for s in got if s.name == sc.SPAN_ROLLOUT_SAMPLE)
    index = sample_span.attributes[sc.ATTR_SAMPLE_INDEX]
    assert index == 0 and isinstance(index, int)
    assert sample_span.attributes["verl.sample.generate_s"] == pytest.approx(0.05)


def test_streamed_v3_answer_of_several_documents(jaeger):
    """grpc-gateway streams: several {"result": ...} objects in a row."""
    spans = many_steps(4, slow_step=3)
    body = b"\n".join(v3_body([s for s in spans if int(s["traceId"], 16) == 0xABC000 + k]) for k in range(1, 5))
    j = jaeger({"/api/v3/traces": (200, body)})
    assert [s.global_step for s in build_steps(JaegerClient(j.url).find_steps("verl", *WINDOW))] == [1, 2, 3, 4]


# -- empty results -----------------------------------------------------------------------------------
def test_no_traces_found_is_empty_not_a_missing_route(jaeger):
    j = jaeger({"/api/v3/traces": NO_TRACES, "/api/traces": (500, b"must not be asked")})
    assert JaegerClient(j.url).find_steps("verl", *WINDOW) == []
    assert j.paths == ["/api/v3/traces"]


def test_legacy_empty_data_is_empty(jaeger):
    j = jaeger({"/api/traces": (200, b'{"data":null,"total":0,"limit":0,"offset":0,"errors":null}')})
    assert JaegerClient(j.url).find_steps("verl", *WINDOW) == []


# -- one trace ---------------------------------------------------------------------------------------------
def test_get_trace_v3_legacy_and_missing(jaeger):
    spans = many_steps(2, slow_step=2)
    one = [s for s in spans if s["traceId"] == f"{0xABC002:032x}"]
    tid = f"{0xABC002:032x}"
    j = jaeger({f"/api/v3/traces/{tid}": (200, v3_body(one)), "/api/v3/traces/": NO_TRACES})
    got = JaegerClient(j.url).get_trace(tid.upper())
    assert {s.trace_id for s in got} == {tid} and len(got) == 12
    assert JaegerClient(j.url).get_trace("0" * 31 + "1") == []
    legacy_missing = (
        404,
        b'{"data":null,"total":0,"limit":0,"offset":0,"errors":[{"code":404,"msg":"trace not found"}]}',
    )
    j2 = jaeger({f"/api/traces/{tid}": (200, legacy_body(one)), "/api/traces/": legacy_missing})
    assert build_steps(JaegerClient(j2.url).get_trace(tid))[0].global_step == 2
    assert JaegerClient(j2.url).get_trace("f" * 32) == []
    assert j2.paths == [
        f"/api/v3/traces/{tid}",
        f"/api/traces/{tid}",
        "/api/v3/traces/" + "f" * 32,
        "/api/traces/" + "f" * 32,
    ]


def test_trace_link():
    assert trace_link("http://localhost:16686/", "ab" * 16) == "http://localhost:16686/trace/" + "ab" * 16
    assert trace_link("https://j.example/jaeger", "01") == "https://j.example/jaeger/trace/01"


def test_rfc3339_has_nanoseconds():
    assert rfc3339(0) == "1970-01-01T00:00:00.000000000Z"
    assert rfc3339(1_700_000_000_000_000_001) == "2023-11-14T22:13:20.000000001Z"


# -- clear errors ------------------------------------------------------------------------------------------
def _one_line_error(excinfo: pytest.ExceptionInfo[JaegerError]) -> str:
    msg = str(excinfo.value)
    assert msg and "\n" not in msg and excinfo.value.__cause__ is None
    return msg


def test_garbage_body_is_a_clear_error(jaeger):
    j = jaeger({"/api/v3/traces": (200, b"\x89PNG\r\n garbage {{{", "application/octet-stream")})
    with pytest.raises(JaegerError) as ei:
        JaegerClient(j.url).find_steps("verl", *WINDOW)
    assert "not JSON" in _one_line_error(ei) and j.url in str(ei.value)


@pytest.mark.parametrize(
    "body",
    [
        b'{"result": {"resourceSpans": [{"scopeSpans": [{"spans": [{}]}]}]}}',  # a span without anything
        b'{"result": {"resourceSpans": [{"scopeSpans": [{"spans": '
        b'[{"traceId": "zz", "spanId": "1", "name": "x"}]}]}]}}',
        b"[1, 2, 3]",
        b'"just a string"',
    ],
)
def test_json_of_the_wrong_shape_is_a_clear_error(jaeger, body):
    j = jaeger({"/api/v3/traces": (200, body)})
    with pytest.raises(JaegerError) as ei:
        JaegerClient(j.url).find_steps("verl", *WINDOW)
    assert "unexpected answer" in _one_line_error(ei)


def test_http_errors_are_clear(jaeger):
    j = jaeger({"/api/v3/traces": (500, b'{"error":{"httpCode":500,"message":"storage:\\n cassandra down"}}')})
    with pytest.raises(JaegerError) as ei:
        JaegerClient(j.url).find_steps("verl", *WINDOW)
    msg = _one_line_error(ei)
    assert "HTTP 500" in msg and "cassandra down" in msg
    j2 = jaeger({"/api/v3/traces": (400, b'{"error":{"message":"malformed parameter query.start_time_min"}}')})
    with pytest.raises(JaegerError, match=r"HTTP 400.*start_time_min"):
        JaegerClient(j2.url).find_steps("verl", *WINDOW)


def test_neither_api_is_a_clear_error(jaeger):
    j = jaeger({})
    with pytest.raises(JaegerError) as ei:
        JaegerClient(j.url).find_steps("verl", *WINDOW)
    assert "neither" in _one_line_error(ei) and j.paths == ["/api/v3/traces", "/api/traces"]


def test_connection_refused_is_a_clear_error():
    port = closed_port()
    with pytest.raises(JaegerError) as ei:
        JaegerClient(f"127.0.0.1:{port}", timeout_s=2).find_steps("verl", *WINDOW)  # no scheme: http assumed
    msg = _one_line_error(ei)
    assert msg.startswith(f"cannot reach Jaeger at http://127.0.0.1:{port}") and "refused" in msg.lower()


def test_silent_server_times_out_with_a_clear_error():
    with socket.socket() as srv:  # accepts connections (backlog) and never answers
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        with pytest.raises(JaegerError) as ei:
            JaegerClient(f"http://127.0.0.1:{srv.getsockname()[1]}", timeout_s=0.5).find_steps("verl", *WINDOW)
    assert "cannot reach Jaeger" in _one_line_error(ei) and "timed out" in str(ei.value)
