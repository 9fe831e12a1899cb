"""`verl-otel slow-steps` end to end on files and a local Jaeger: ranking, the deviating phase, JSON,
malformed lines skipped and counted, empty window, unreachable Jaeger."""

import json
import time

from otlp_receiver import free_port
from test_jaeger_client import FakeJaeger, many_steps, v3_body

from verl_otel.cli.main import main


def _write_file(path, spans):
    lines = [json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "verl"}}]}, "scopeSpans": [{"spans": [s]}]}]})
        for s in spans]
    path.write_text("\n".join(lines[:5] + ["{not json", '{"resourceSpans": [{"scopeSpans": [{"spans": [{}]}]}]}']
                              + lines[5:]) + "\n")


def _recent(spans):
    shift = int(time.time() * 1e9) - 3600 * 10**9 - int(spans[0]["startTimeUnixNano"])
    for s in spans:
        s["startTimeUnixNano"] = str(int(s["startTimeUnixNano"]) + shift)
        s["endTimeUnixNano"] = str(int(s["endTimeUnixNano"]) + shift)
    return spans


def test_file_ranking_text_and_json(tmp_path, capsys):
    f = tmp_path / "traces.jsonl"
    _write_file(f, _recent(many_steps(12, slow_step=7)))
    assert main(["slow-steps", "--file", str(f), "--top", "2"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("#1 step 7 ")
    assert "cause: update_actor 3.4\u00d7 its median" in out
    assert "skipped 2 malformed lines" in err
    assert main(["slow-steps", "--file", str(f), "--top", "3", "--json", "--jaeger-ui", "http://j:16686"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["global_step"] for d in doc][0] == 7 and len(doc) == 3
    assert doc[0]["cause"]["phase"] == "update_actor" and doc[0]["link"].startswith("http://j:16686/trace/")
    assert doc[0]["slowest_samples"][0]["index"] == 2


def test_empty_window_and_missing_file(tmp_path, capsys):
    f = tmp_path / "traces.jsonl"
    _write_file(f, _recent(many_steps(3, slow_step=2)))
    assert main(["slow-steps", "--file", str(f), "--since", "10m"]) == 2
    assert "no step traces found" in capsys.readouterr().err
    assert main(["slow-steps", "--file", str(tmp_path / "nope.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_jaeger_source(capsys):
    j = FakeJaeger({"/api/v3/traces": (200, v3_body(_recent(many_steps(5, slow_step=4))))})
    try:
        assert main(["slow-steps", "--jaeger", j.url, "--top", "1"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("#1 step 4 ") and f"{j.url}/trace/" in out
    finally:
        j.close()
    assert main(["slow-steps", "--jaeger", f"http://127.0.0.1:{free_port()}"]) == 2
    assert "cannot reach Jaeger" in capsys.readouterr().err
