"""Console-only mode: ``VERL_PROGRESS_LOG=1`` with nothing else prints the seed's lines from a fresh process
(the .pth start-up line reacts to it) and exports nothing: no trace file, no file_sd list, no listening port."""

from __future__ import annotations

import json
import re

import pytest

from verl_otel import _env, config


@pytest.mark.parametrize(
    "env, mode",
    [
        ({}, _env.MODE_OFF),
        ({"VERL_PROGRESS_LOG": "1"}, _env.MODE_CONSOLE),
        ({"VERL_PROGRESS_LOG": "0"}, _env.MODE_OFF),
        ({"VERL_PROGRESS_LOG": "maybe"}, _env.MODE_OFF),
        ({"VERL_PROGRESS_LOG": "1", "VERL_OTEL_ENABLED": "1"}, _env.MODE_TELEMETRY),
        ({"VERL_PROGRESS_LOG": "1", "VERL_OTEL_ENABLED": "0"}, _env.MODE_CONSOLE),
        ({"VERL_PROGRESS_LOG": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4317"}, _env.MODE_TELEMETRY),
        ({"VERL_PROGRESS_LOG": "1", "OTEL_SDK_DISABLED": "true", "VERL_OTEL_ENABLED": "1"}, _env.MODE_CONSOLE),
        ({"VERL_OTEL_ENABLED": "1"}, _env.MODE_TELEMETRY),
    ],
)
def test_mode(env, mode):
    assert _env.mode(env) == mode


def test_console_only_settings_have_no_port_and_no_step_line():
    s = config.load({"VERL_PROGRESS_LOG": "1", "VERL_OTEL_PROMETHEUS_PORT": "9100"}, report=False)
    assert s.console_only and s.prometheus_port is None and not s.step_line
    t = config.load({"VERL_PROGRESS_LOG": "1", "VERL_OTEL_ENABLED": "1"}, report=False)
    assert not t.console_only and t.prometheus_port == 0 and t.step_line


def _stats(proc):
    return json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("DRIVE_STATS ")).split(" ", 1)[1])


def test_progress_log_alone_prints_the_seed_lines_and_exports_nothing(drive, tmp_path):
    proc = drive(steps=2, VERL_PROGRESS_LOG="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    for step in (1, 2):
        assert f"[VERL_PROGRESS][step={step}] update_actor start" in lines, proc.stdout[-2000:]
        assert any(re.fullmatch(rf"\[VERL_PROGRESS\]\[step={step}\] update_actor done: \d+\.\d\ds", x) for x in lines)
    assert not any(x.startswith("[verl-otel] step") for x in lines), "our step line is not one of the seed's"
    data = tmp_path / "verl-otel-data"
    assert not (data / "traces.jsonl").exists() and not (data / "prometheus_targets.json").exists()
    assert _stats(proc)["listening"] == 0


def test_with_telemetry_the_same_lines_and_the_exports(drive, tmp_path):
    """The same trackers print the same lines when telemetry is on (and the check above can see a port)."""
    proc = drive(steps=2, VERL_PROGRESS_LOG="1", VERL_OTEL_ENABLED="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "[VERL_PROGRESS][step=2] update_actor start" in lines
    assert any(x.startswith("[verl-otel] step 2") for x in lines)
    assert (tmp_path / "verl-otel-data" / "traces.jsonl").exists()
    assert _stats(proc)["listening"] >= 1


def test_real_console_only_output_is_in_the_seeds_formats():
    """A real `verl-otel demo --telemetry console --trainer v1 --steps 3` (tests/fixtures): every line in one of
    the seed's formats, each step's rollout start with its details and the manager's total bar at 8/8."""
    from helpers.console_lines import PATTERNS, kind, progress_lines
    from helpers.procs import ROOT

    lines = progress_lines(ROOT / "tests" / "fixtures" / "console_v1_console_only.log")
    assert [x for x in lines if kind(x) is None] == []
    for step in (1, 2, 3):
        start = [m for m in map(PATTERNS["start"].fullmatch, lines) if m and m["step"] == str(step) and m["n"]]
        assert len(start) == 1 and start[0]["phase"] == "rollout"
        total = [
            m
            for m in map(PATTERNS["rollout_bar"].fullmatch, lines)
            if m and m["step"] == str(step) and m["who"] == "rollout_manager" and m["mode"] == "train"
        ]
        assert total and (total[-1]["done"], total[-1]["total"]) == ("8", "8")
    validations = [m["step"] for m in map(PATTERNS["start"].fullmatch, lines) if m and m["phase"] == "validate"]
    totals = {
        m["step"]: (m["done"], m["total"])
        for m in map(PATTERNS["rollout_bar"].fullmatch, lines)
        if m and m["who"] == "rollout_manager" and m["mode"] == "validate"
    }
    assert validations and {s: totals.get(s) for s in validations} == dict.fromkeys(validations, ("4", "4"))


@pytest.mark.parametrize(
    "telemetry, mode",
    [("console", _env.MODE_CONSOLE), ("embedded", _env.MODE_TELEMETRY), ("otlp", _env.MODE_TELEMETRY)],
)
def test_demo_telemetry_choice_is_the_mode_a_user_gets(telemetry, mode):
    """`verl-otel demo --telemetry X` sets what a user would, over the demo's own VERL_OTEL_ENABLED=1."""
    from verl_otel.demo.runner import telemetry_env

    env = {"VERL_OTEL_ENABLED": "1", **telemetry_env(telemetry, "http://localhost:4317")}
    assert _env.mode(env) == mode
    assert config.load(env, report=False).console_only == (telemetry == "console")
