"""The `verl-otel slow-steps` command on a trace file (OTLP/JSON, as the Collector's file exporter writes) and
on a local Jaeger: text and --json, malformed lines skipped and counted, the default file, an empty window,
another service, option parsing, unreachable Jaeger, and `verl-otel` dispatching to it."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import pytest

from helpers.jaeger import FakeJaeger, closed_port, many_steps, v3_body
from helpers.step_spans import N_STEPS, SLOW_STEP, S, sdk_run, write_lines

from verl_otel import semconv as sc
from verl_otel.analysis.otlp_json import read_file
from verl_otel.cli import slow_steps as cli


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verl-otel")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def run_cli(*argv: str) -> int:
    return cli.run(make_parser().parse_args(["slow-steps", *argv]))


# -- the CLI on a file ------------------------------------------------------------------------------------
GARBAGE = [
    "{not json",
    '{"resourceSpans": [{"scopeSpans": [{"spans": [{}]}]}]}',
    "[]",
    '"a string"',
    '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "nothex!", "spanId": "01", "name": "x", '
    '"startTimeUnixNano": "1", "endTimeUnixNano": "2"}]}]}]}',
    "[" * 100_000,  # deep enough to hit the JSON decoder's recursion limit
]
NOT_UTF8 = b"\xff\xfe{half a line\n"


def test_cli_text_on_a_file_with_malformed_lines(tmp_path, capsys, recent_spans):
    f = tmp_path / "traces.jsonl"
    write_lines(f, recent_spans, GARBAGE)
    with open(f, "ab") as fh:
        fh.write(NOT_UTF8)
    bad = len(GARBAGE) + 1
    assert read_file(f).malformed == bad
    assert run_cli("--file", str(f), "--top", "2") == 0
    out, err = capsys.readouterr()
    assert err.strip() == f"verl-otel slow-steps: skipped {bad} malformed lines in {f}"
    lines = out.splitlines()
    assert lines[0].startswith("2 slowest of 10 steps of service 'verl' in the last 24h")
    # a file read with no Jaeger named: no trace links (they would point at a Jaeger that may not exist)
    assert lines[1].startswith(f"#1 step {SLOW_STEP} ") and "/trace/" not in out and "http" not in out
    assert lines[2].startswith("   cause: update_actor 3.4\u00d7 its median (")
    assert "update_weights 0.20s (1.0\u00d7) in 2 runs" in out
    assert (
        "   slowest samples: #2 1.80s (n=0, worker 0), #7 0.80s (n=1, worker 1) ERROR, #6 0.70s (n=0, worker 1)"
    ) in out
    assert f"#2 step {N_STEPS} " in out


def test_cli_json(tmp_path, capsys, recent_spans):
    f = tmp_path / "traces.jsonl"
    write_lines(f, recent_spans)
    assert run_cli("--file", str(f), "--json", "--top", "20", "--jaeger-ui", "http://ui:1") == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert err == "" and len(doc) == N_STEPS and [d["rank"] for d in doc] == list(range(1, N_STEPS + 1))
    assert doc[0]["global_step"] == SLOW_STEP and doc[0]["cause"]["phase"] == "update_actor"
    assert all(d["link"].startswith("http://ui:1/trace/") for d in doc)
    assert [d["duration_s"] for d in doc] == sorted((d["duration_s"] for d in doc), reverse=True)


def test_cli_default_file_is_under_verl_otel_dir(tmp_path, capsys, monkeypatch, recent_spans):
    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    write_lines(tmp_path / "run" / sc.TRACES_FILE, recent_spans)
    assert run_cli("--top", "1") == 0
    assert f"#1 step {SLOW_STEP} " in capsys.readouterr().out
    monkeypatch.delenv(sc.ENV_DIR)
    monkeypatch.chdir(tmp_path)
    assert run_cli() == 2
    assert "cannot read verl-otel-data/traces.jsonl" in capsys.readouterr().err


def test_cli_empty_window(tmp_path, capsys):
    f = tmp_path / "traces.jsonl"
    write_lines(f, sdk_run(time.time_ns() - 3 * 86400 * S))  # three days old
    assert run_cli("--file", str(f), "--since", "2h") == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"verl-otel slow-steps: no step traces found for service 'verl' in the last 2h in {f}")
    assert "older spans in the file: widen --since" in err
    assert run_cli("--file", str(f), "--since", "4d", "--top", "1") == 0
    capsys.readouterr()
    f.write_text("")
    assert run_cli("--file", str(f)) == 2
    assert "no step traces found" in capsys.readouterr().err


def test_cli_other_service_hint(tmp_path, capsys):
    f = tmp_path / "traces.jsonl"
    write_lines(f, sdk_run(time.time_ns() - 600 * S, n=3, service="my-rl"))
    assert run_cli("--file", str(f)) == 2
    assert "(step traces exist for service 'my-rl': use --service)" in capsys.readouterr().err
    assert run_cli("--file", str(f), "--service", "my-rl", "--top", "1") == 0


@pytest.mark.parametrize(("text", "seconds"), [("2h", 7200), ("30m", 1800), ("1d", 86400), ("90s", 90), ("45", 45)])
def test_since_parsing(text, seconds):
    assert cli.parse_since(text) == seconds
    assert make_parser().parse_args(["slow-steps", "--since", text]).since == seconds


@pytest.mark.parametrize(
    "argv",
    [["--since", "soon"], ["--since", "0h"], ["--top", "0"], ["--top", "x"], ["--jaeger", "http://a", "--file", "b"]],
)
def test_bad_options_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as ei:
        make_parser().parse_args(["slow-steps", *argv])
    assert ei.value.code == 2


def test_defaults():
    args = make_parser().parse_args(["slow-steps"])
    got = (args.service, args.since, args.top, args.json, args.jaeger, args.file, args.jaeger_ui)
    assert got == ("verl", 86400, 5, False, None, None, None)


# -- the CLI on Jaeger -------------------------------------------------------------------------------------
def _shift_to_recent(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    shift = time.time_ns() - 3600 * S - int(spans[0]["startTimeUnixNano"])
    for s in spans:
        s["startTimeUnixNano"] = str(int(s["startTimeUnixNano"]) + shift)
        s["endTimeUnixNano"] = str(int(s["endTimeUnixNano"]) + shift)
    return spans


def test_cli_on_jaeger(capsys):
    j = FakeJaeger({"/api/v3/traces": (200, v3_body(_shift_to_recent(many_steps(30, slow_step=17))))})
    try:
        assert run_cli("--jaeger", j.url + "/", "--top", "1", "--since", "3h") == 0
        out = capsys.readouterr().out
        assert "#1 step 17 " in out and f"{j.url}/trace/{0xABC000 + 17:032x}" in out
        assert "cause: update_actor 3.4\u00d7 its median (3.40s vs 1.00s, +2.40s)" in out
        # the step summaries first; a run without them (this one): its step traces whole
        ops = [q["query.operation_name"] for _, q in j.queries]
        assert ops[0] == ["step.summary"] and ops[-1] == ["step"]
        assert all(q["query.service_name"] == ["verl"] for _, q in j.queries)
        assert run_cli("--jaeger", j.url, "--json", "--jaeger-ui", "https://ui.example") == 0
        assert json.loads(capsys.readouterr().out)[0]["link"].startswith("https://ui.example/trace/")
    finally:
        j.close()


def test_cli_jaeger_no_traces_and_unreachable(capsys):
    j = FakeJaeger({"/api/v3/traces": (404, b'{"error":{"httpCode":404,"message":"No traces found"}}')})
    try:
        assert run_cli("--jaeger", j.url, "--since", "30m") == 2
        err = capsys.readouterr().err
        assert err.strip() == (
            f"verl-otel slow-steps: no step traces found for service 'verl' in the last 30m in Jaeger at {j.url}"
        )
    finally:
        j.close()
    port = closed_port()
    assert run_cli("--jaeger", f"http://127.0.0.1:{port}") == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"verl-otel slow-steps: cannot reach Jaeger at http://127.0.0.1:{port}: ")


def test_main_dispatches_to_slow_steps(tmp_path, capsys, recent_spans):
    main = pytest.importorskip("verl_otel.cli.main").main  # written by someone else: wired if present
    f = tmp_path / "traces.jsonl"
    write_lines(f, recent_spans)
    assert main(["slow-steps", "--file", str(f), "--top", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["global_step"] == SLOW_STEP
