"""`verl-otel val-generations`: validation generations read back from OTLP/JSON written by the OTel SDK
(the trace file), the same spans as Jaeger's /api/v3 answer and as its legacy /api/traces answer (span
events as logs); newest first, --step, --json, text only where captured, the data source where one."""

from __future__ import annotations

import json
import time

import pytest

from helpers.step_spans import otlp_json
from helpers.val_spans import GSM8K, S, sdk_validations

from verl_otel import semconv as sc
from verl_otel.analysis.jaeger import JaegerClient
from verl_otel.analysis.otlp_json import parse_request
from verl_otel.analysis.val_generation_reader import generations
from verl_otel.cli.main import main


@pytest.fixture
def doc() -> dict:
    return otlp_json(sdk_validations(time.time_ns() - 3600 * S))


def _expected_order(gens) -> list:
    return [(g.step, g.param_version, g.score) for g in gens]


EXPECTED = [(None, 5, 1.0), (4, None, 0.5), (2, None, 1.0), (2, None, 0.0), (0, None, 0.0), (0, None, 1.0)]


def test_generations_newest_first_with_step_source_and_text(doc):
    gens = generations(parse_request(doc))
    assert _expected_order(gens) == EXPECTED
    rollouter, multi, first, cut = gens[0], gens[1], gens[2], gens[3]
    assert multi.data_source is None and multi.data_sources == [GSM8K, "math"]
    assert first.data_source == GSM8K and first.prompt == "what is 2 plus 2 ?\nthink" and first.response == "4 #### 4"
    assert first.truncated is False and cut.truncated is True
    assert gens[-1].prompt is None and gens[-1].response is None and gens[-1].truncated is None
    assert rollouter.step is None and rollouter.data_source is None


def test_cli_text_json_and_step(tmp_path, capsys, doc):
    f = tmp_path / "traces.jsonl"
    f.write_text(json.dumps(doc) + "\n")
    assert main(["val-generations", "--file", str(f)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("6 validation generations of service 'verl' in the last 7d")
    heads = [ln for ln in out if not ln.startswith(" ")][1:]
    assert [h.split("  ")[0] for h in heads] == ["param version 5", "step 4", "step 2", "step 2", "step 0", "step 0"]
    assert heads[1].startswith("step 4  score 0.5  data source openai/gsm8k or math  ")
    i = out.index(next(h for h in out if h.startswith("step 2  score 1  data source openai/gsm8k")))
    assert out[i + 1 : i + 5] == ["    prompt:", "      what is 2 plus 2 ?", "      think", "    response:"]
    assert "    prompt: (truncated)" in out
    assert main(["val-generations", "--file", str(f), "--step", "2", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(g["step"], g["score"], g["data_source"]) for g in got] == [(2, 1.0, GSM8K), (2, 0.0, GSM8K)]
    assert got[1]["response"] == "tom has" and got[1]["truncated"] is True
    assert main(["val-generations", "--file", str(f), "--step", "3"]) == 2
    assert "no validation generations of step 3" in capsys.readouterr().err


def test_cli_unreadable_file_and_bad_step(tmp_path, capsys):
    assert main(["val-generations", "--file", str(tmp_path / "none.jsonl")]) == 2
    assert capsys.readouterr().err.startswith("verl-otel val-generations: cannot read ")
    with pytest.raises(SystemExit) as ei:
        main(["val-generations", "--step", "x"])
    assert ei.value.code == 2


def _legacy(doc: dict) -> bytes:
    """Jaeger's legacy /api/traces shape of the same spans: µs times, typed tags, events as span logs
    (the event name in an ``event`` field), as in shared/fixtures/jaeger/api_traces_v1_search.json."""

    def typed(a: dict) -> dict:
        ((kind, v),) = a["value"].items()
        if kind == "arrayValue":
            return {
                "key": a["key"],
                "type": "string",
                "value": json.dumps([next(iter(x.values())) for x in v.get("values", [])]),
            }
        typ = {"intValue": "int64", "doubleValue": "float64", "boolValue": "bool"}.get(kind, "string")
        return {"key": a["key"], "type": typ, "value": int(v) if kind == "intValue" else v}

    traces: dict = {}
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                tr = traces.setdefault(
                    s["traceId"],
                    {
                        "traceID": s["traceId"],
                        "spans": [],
                        "warnings": None,
                        "processes": {"p1": {"serviceName": "verl", "tags": []}},
                    },
                )
                start = int(s["startTimeUnixNano"]) // 1000
                tr["spans"].append(
                    {
                        "traceID": s["traceId"],
                        "spanID": s["spanId"],
                        "operationName": s["name"],
                        "references": [{"refType": "CHILD_OF", "traceID": s["traceId"], "spanID": s["parentSpanId"]}]
                        if s.get("parentSpanId")
                        else [],
                        "startTime": start,
                        "duration": int(s["endTimeUnixNano"]) // 1000 - start,
                        "tags": [typed(a) for a in s.get("attributes", [])],
                        "processID": "p1",
                        "warnings": None,
                        "logs": [
                            {
                                "timestamp": int(e["timeUnixNano"]) // 1000,
                                "fields": [{"key": "event", "type": "string", "value": e["name"]}]
                                + [typed(a) for a in e.get("attributes", [])],
                            }
                            for e in s.get("events", [])
                        ],
                    }
                )
    return json.dumps({"data": list(traces.values()), "total": 0, "limit": 0, "offset": 0, "errors": None}).encode()


def test_from_jaeger_v3_and_legacy(jaeger, doc, capsys):
    j3 = jaeger({"/api/v3/traces": (200, json.dumps({"result": doc}).encode())})
    v3 = generations(JaegerClient(j3.url).find_traces("verl", 0, time.time_ns(), sc.PHASE_VALIDATE))
    assert _expected_order(v3) == EXPECTED
    j1 = jaeger({"/api/traces": (200, _legacy(doc))})
    legacy = generations(JaegerClient(j1.url).find_traces("verl", 0, time.time_ns(), sc.PHASE_VALIDATE))
    assert _expected_order(legacy) == EXPECTED
    assert legacy[2].prompt == "what is 2 plus 2 ?\nthink" and legacy[3].truncated is True
    # the legacy API turns array attributes into JSON text
    assert legacy[2].data_source == GSM8K and legacy[1].data_sources == [GSM8K, "math"]
    # the CLI asks Jaeger for traces holding either validation span, and a trace found twice counts once
    assert main(["val-generations", "--jaeger", j3.url, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(g["step"], g["param_version"], g["score"]) for g in got] == EXPECTED
    ops = [q["query.operation_name"][0] for p, q in j3.queries if p == "/api/v3/traces" and "query.operation_name" in q]
    assert ops[-2:] == [sc.PHASE_VALIDATE, sc.SPAN_ROLLOUTER_VALIDATE]
