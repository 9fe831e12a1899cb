"""`verl-otel val-generations` on the real verl CPU demo's trace file (the shared v1 run: 3 steps, validation
before training and at steps 2 and 3, trainer.log_val_generations=2, gsm8k-style data)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers.traces import event_names, load_spans

pytestmark = pytest.mark.verl


def test_val_generations_of_the_demo(v1_run):
    assert v1_run.rc == 0, v1_run.log_tail()
    traces = v1_run.out / "traces.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "verl_otel.cli.main", "val-generations", "--file", str(traces), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    # as many as verl logged: the events on the run's validate spans
    events = sum(event_names(s).count("verl.val_generation") for s in load_spans(traces) if s.name == "validate")
    assert len(got) == events == 6
    assert [g["step"] for g in got] == [3, 3, 2, 2, 0, 0]  # newest first
    assert all(g["data_source"] == "openai/gsm8k" and g["data_sources"] == ["openai/gsm8k"] for g in got)
    assert all(isinstance(g["score"], float) and 0.0 <= g["score"] <= 1.0 for g in got)
    assert all(g["prompt"] is None and g["response"] is None for g in got)  # no VERL_OTEL_CAPTURE_TEXT
    one = subprocess.run(
        [sys.executable, "-m", "verl_otel.cli.main", "val-generations", "--file", str(traces), "--step", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [ln for ln in one.stdout.splitlines() if ln.startswith("step ")]
    assert one.returncode == 0 and len(lines) == 2 and all(ln.startswith("step 2  score ") for ln in lines)
