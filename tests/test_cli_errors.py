"""The CLI's manners: a reader that goes away (`| head`) ends a command quietly, and argument errors are
reported at once on stderr with exit 2, before anything heavy (verl, torch) is imported."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time

import pytest

from helpers.step_spans import otlp_json, sdk_run, write_lines
from helpers.val_spans import sdk_validations

from verl_otel.cli.main import EXIT_BROKEN_PIPE

CLI = [sys.executable, "-m", "verl_otel.cli.main"]


@pytest.fixture
def trace_file(tmp_path):
    f = tmp_path / "traces.jsonl"
    write_lines(f, sdk_run(time.time_ns() - 3600 * 10**9))
    with open(f, "a") as fh:
        fh.write(json.dumps(otlp_json(sdk_validations(time.time_ns() - 1800 * 10**9))) + "\n")
    return f


@pytest.mark.parametrize(
    "argv",
    [["slow-steps", "--top", "10"], ["slow-steps", "--json"], ["val-generations"], ["val-generations", "--json"]],
)
def test_closed_pipe_is_not_a_traceback(trace_file, argv):
    proc = subprocess.Popen([*CLI, *argv, "--file", str(trace_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line: every write hits a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == EXIT_BROKEN_PIPE, err
    assert err == ""
    # the same command with a reader works (the closed pipe was the only difference)
    ok = subprocess.run([*CLI, *argv, "--file", str(trace_file)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout and ok.stderr == ""


def test_top_once_into_a_closed_pipe(tmp_path):
    (tmp_path / "prometheus_targets.json").write_text("[]")
    proc = subprocess.Popen(
        [*CLI, "top", "--once", "--targets", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == EXIT_BROKEN_PIPE and err == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--slow", "updat_actor@3=3"],
        ["demo", "--slow", "update_actor@x=3"],
        ["demo", "--steps", "0"],
        ["demo", "--telemetry", "jaeger"],
        ["demo", "--telemetry", "otlp"],
    ],
)
def test_demo_argument_errors_come_first(tmp_path, argv):
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = subprocess.run([*CLI, *argv, "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1].startswith("verl-otel demo: error: argument ")
    assert not out.exists()  # nothing was built or started
    assert time.monotonic() - t0 < 15  # no verl/torch import (~40 s on 2 cores) before the error
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from verl_otel.cli.main import main; "
            f"sys.argv = ['verl-otel', *{argv!r}]; "
            "exec('try:\\n main()\\nexcept SystemExit: pass'); "
            "print(sorted(m for m in ('torch', 'verl', 'ray') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.stdout.strip() == "[]", probe.stderr


def test_python_m_demo_reports_the_same(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "verl_otel.demo", "--slow", "nope", "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == "" and "argument --slow: bad --slow 'nope'" in proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here: it would run")
def test_demo_rollout_vllm_without_vllm_says_where_to_get_it(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [*CLI, "demo", "--rollout", "vllm", "--out", str(out)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and proc.stdout == "" and not out.exists()
    assert "make install-vllm" in proc.stderr and "Traceback" not in proc.stderr
