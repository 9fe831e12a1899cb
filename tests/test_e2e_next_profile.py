"""VERL_OTEL_CAPTURE_NEXT=1 on a real run (the shared legacy run, tests/conftest.py::legacy_run): its planted stalls
in step 3 (values, update_critic) arm verl's own torch profiler for step 4 through ``global_profiler.steps``, and
verl writes the profile where the stall record and the phase span of step 4 say; no step is profiled that no stall
armed (the run's other stalls: step 2's weight sync arms step 3, step 4's update_actor step 5)."""

from __future__ import annotations

import glob
import gzip
import json
import re

import pytest

from verl_otel import semconv as sc
from verl_otel.analysis.otlp_json import read_file
from verl_otel.cli.main import main

pytestmark = pytest.mark.verl


def _trainer_stalls(spans):
    trainer = sc.PROCESS_ROLE_TRAINER
    return [s for s in spans if s.name == sc.SPAN_STALL and s.attributes.get(sc.ATTR_STALL_PROCESS_ROLE) == trainer]


def _step_of(name: str) -> int:
    m = re.search(r"_step(\d+)_", name)
    return int(m.group(1)) if m else -1


def test_a_stall_in_step_3_profiles_step_4_with_verls_own_profiler(legacy_run):
    assert legacy_run.rc == 0, legacy_run.log_tail()
    spans = read_file(legacy_run.out / sc.TRACES_FILE).spans
    stalls = _trainer_stalls(spans)
    armed = [s for s in stalls if s.attributes.get(sc.ATTR_STALL_NEXT_PROFILE)]
    by_phase = {s.attributes[sc.ATTR_PHASE]: s for s in armed}
    assert {"values", "update_critic"} <= set(by_phase), [(s.attributes[sc.ATTR_PHASE], s.attributes) for s in stalls]
    where = by_phase["values"].attributes[sc.ATTR_STALL_NEXT_PROFILE]
    folder = legacy_run.out / "verl-profile"
    assert where == f"{folder}/*_step4_*"
    files = glob.glob(where)
    assert files, sorted(p.name for p in folder.glob("*"))
    # verl's torch profiler wrote a chrome trace of the training worker's step 4 (CPU activities)
    with open(files[0], "rb") as f:
        trace = json.loads(gzip.decompress(f.read()))
    names = {e.get("name", "") for e in trace["traceEvents"]}
    assert any(n.startswith("aten::") for n in names), sorted(names)[:20]
    # the phases of step 4 that stalled in step 3 carry the event with the same place
    for phase in ("values", "update_critic"):
        (span,) = [s for s in spans if s.name == phase and s.attributes.get(sc.ATTR_GLOBAL_STEP) == 4]
        (event,) = [e for e in span.events if e.name == sc.EVENT_CAPTURE]
        assert event.attributes[sc.ATTR_CAPTURE_FILE] == where
        assert event.attributes[sc.ATTR_CAPTURE_TOOL] == sc.CAPTURE_TOOL_VERL_PROFILER
        assert event.attributes[sc.ATTR_CAPTURE_ARMED_BY] == 3
    # only armed steps are profiled, once per phase, within VERL_OTEL_CAPTURE_MAX (4)
    profiled = {_step_of(p.name) for p in folder.iterdir()}
    armed_steps = {_step_of(s.attributes[sc.ATTR_STALL_NEXT_PROFILE]) for s in armed} - {legacy_run.steps + 1}
    assert profiled == armed_steps and len(profiled) <= 4, (profiled, armed_steps)
    assert len(armed) == len(by_phase)


def test_doctor_names_the_next_steps_profile(legacy_run, capsys):
    assert main(["doctor", "--dir", str(legacy_run.out), "--json"]) == 0
    stalls = json.loads(capsys.readouterr().out)["stalls"]
    trainer = sc.PROCESS_ROLE_TRAINER
    (values,) = [r for r in stalls if r["phase"] == "values" and r["process_role"] == trainer and r["step"] == 3]
    assert values["next_profile"].endswith("/verl-profile/*_step4_*")
    assert main(["doctor", "--dir", str(legacy_run.out)]) == 0
    assert "next step: verl's profiler wrote " + str(legacy_run.out / "verl-profile") in capsys.readouterr().out
