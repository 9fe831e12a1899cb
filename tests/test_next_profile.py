"""VERL_OTEL_CAPTURE_NEXT=1 (telemetry/next_profile.py, hooks/next_profile.py): a stall in step K puts K+1 into
verl's ``global_profiler.steps`` (a real OmegaConf config, as verl's trainers hold it), once per phase and within
VERL_OTEL_CAPTURE_MAX; the stall's record and the phase span of K+1 say where verl writes the profile. The real
run's profile is checked on the shared legacy run (tests/test_e2e_next_profile.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from verl_otel import semconv as sc
from verl_otel.analysis.otlp_json import read_file
from verl_otel.cli.main import main
from verl_otel.config import CaptureSettings
from verl_otel.hooks.next_profile import overrides
from verl_otel.process.stall_record import Stall
from verl_otel.telemetry.next_profile import NextProfile, profile_glob


def _stall(phase: str, step: int) -> Stall:
    return Stall(phase, phase, step, 2.0, 1.0, "", sc.STALL_UNKNOWN, "", sc.PROCESS_ROLE_TRAINER, 1, "h")


def test_a_stall_arms_the_next_step_once_per_phase_within_the_runs_bound():
    added: list[int] = []
    profiles = NextProfile(CaptureSettings(max_per_process=2), lambda phase: None)
    first = _stall("values", 3)
    profiles.arm(first)  # not attached (no fit, or verl's profiler not set up): nothing
    assert first.next_profile == "" and not profiles.attached
    profiles.attach(added.append, "/data/profile/")
    for stall in (first, _stall("update_critic", 3), _stall("values", 4), _stall("adv", 5), _stall("ref", 6)):
        profiles.arm(stall)
    # values@3 and update_critic@3 arm step 4 (one profile); values again: no (once per phase); adv@5 arms step 6;
    # ref@6 would be a third profiled step: past VERL_OTEL_CAPTURE_MAX=2
    assert first.next_profile == "/data/profile/*_step4_*" == profile_glob("/data/profile", 4)
    assert added == []  # handed to verl on the training thread only
    profiles.on_phase_end("values", 3, 1.0, "")
    assert added == [4, 6]
    profiles.on_phase_start("adv", 4)
    assert added == [4, 6]


def test_the_demo_overrides_set_up_verls_torch_profiler_for_cpu_or_cuda():
    cpu = overrides("/o/profile", cuda=False)
    assert "global_profiler.tool=torch" in cpu and "global_profiler.save_path=/o/profile" in cpu
    assert "critic.profiler.enable=true" in cpu and "actor_rollout_ref.actor.profiler.enable=true" in cpu
    assert "critic.profiler.tool_config.torch.contents=[cpu]" in cpu
    assert "critic.profiler.tool_config.torch.contents=[cuda]" in overrides("/o", cuda=True)


# a trainer (the step tracer and the hooks' attach, with verl's config as OmegaConf holds it) whose step 1 `values`
# stalls (0.5 s threshold): step 2 goes into global_profiler.steps, its `values` span carries the event
_TRAINER = textwrap.dedent(
    """
    import json, sys, time
    from types import SimpleNamespace
    from omegaconf import OmegaConf
    from verl_otel import trackers
    from verl_otel import semconv as sc
    from verl_otel.hooks import next_profile
    from verl_otel.telemetry.steps import RunInfo

    ready = sys.argv[1] == "ready"
    cfg = {"global_profiler": {"tool": "torch" if ready else None, "steps": None, "save_path": sys.argv[2]},
           "critic": {"profiler": {"enable": True}}}
    config = OmegaConf.create(cfg)
    OmegaConf.set_struct(config, True)
    trainer = SimpleNamespace(config=config, global_steps=1)
    m = trackers.current()
    m.wire(sc.PROCESS_ROLE_TRAINER)
    steps = m.steps
    steps.fit_started(RunInfo("legacy", "proj", "exp", 2, 4, 1), lambda: trainer.global_steps)
    next_profile.attach(trainer, "legacy", m.next_profile)
    for step in (1, 2):
        trainer.global_steps = step
        steps.phase_enter(sc.VERL_TIMER_STEP)
        token = steps.phase_enter("values")
        time.sleep(1.2 if step == 1 else 0.05)
        steps.phase_exit(token, None)
        steps.metrics_logged({"training/global_step": step}, step)
    steps.fit_ended(None)
    print(json.dumps(OmegaConf.to_container(config.global_profiler)["steps"]))
    """
)


def _run(tmp_path: Path, ready: str) -> tuple[subprocess.CompletedProcess, Path]:
    data = tmp_path / ready
    env = {
        "PATH": "/usr/bin:/bin",
        sc.ENV_DIR: str(data),
        sc.ENV_STALL_SECONDS: "0.5",
        sc.ENV_CAPTURE: "0",
        sc.ENV_CAPTURE_NEXT: "1",
        "VERL_OTEL_PROMETHEUS_PORT": "",
    }
    args = [sys.executable, "-c", _TRAINER, ready, str(tmp_path / "profile")]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, data


def test_a_stall_in_step_k_profiles_step_k_plus_1_through_verls_config(tmp_path, capsys):
    done, data = _run(tmp_path, "ready")
    assert json.loads(done.stdout.splitlines()[-1]) == [2]  # steps was unset: a list, then step 2 armed
    where = profile_glob(str(tmp_path / "profile"), 2)
    spans = read_file(data / sc.TRACES_FILE).spans
    (stall,) = [s for s in spans if s.name == sc.SPAN_STALL]
    assert stall.attributes[sc.ATTR_STALL_NEXT_PROFILE] == where
    values = {s.attributes[sc.ATTR_GLOBAL_STEP]: s for s in spans if s.name == "values"}
    assert not [e for e in values[1].events if e.name == sc.EVENT_CAPTURE]
    (event,) = [e for e in values[2].events if e.name == sc.EVENT_CAPTURE]
    assert event.attributes[sc.ATTR_CAPTURE_FILE] == where
    assert event.attributes[sc.ATTR_CAPTURE_TOOL] == sc.CAPTURE_TOOL_VERL_PROFILER
    assert event.attributes[sc.ATTR_CAPTURE_ARMED_BY] == 1
    # slow-steps names it under step 2 (and the step's JSON lists it)
    assert main(["slow-steps", "--file", str(data / sc.TRACES_FILE)]) == 0
    assert f"capture: {where} ({sc.CAPTURE_TOOL_VERL_PROFILER}, in values)" in capsys.readouterr().out
    assert main(["slow-steps", "--file", str(data / sc.TRACES_FILE), "--json"]) == 0
    by_step = {s["global_step"]: s for s in json.loads(capsys.readouterr().out)}
    assert by_step[2]["captures"] == [{"span": "values", "file": where, "tool": sc.CAPTURE_TOOL_VERL_PROFILER}]
    assert by_step[1]["captures"] == []
    # doctor names it: not written here (no verl worker), then where verl wrote it
    assert main(["doctor", "--dir", str(data)]) == 0
    assert f"next step: verl's profiler writes {where} (not here" in capsys.readouterr().out
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "critic_train_step2_rank0_pid1_1.json.gz").write_bytes(b"")
    assert main(["doctor", "--dir", str(data), "--json"]) == 0
    (rec,) = json.loads(capsys.readouterr().out)["stalls"]
    assert rec["next_profile"] == where
    assert main(["doctor", "--dir", str(data)]) == 0
    assert "next step: verl's profiler wrote " + str(tmp_path / "profile" / "critic_") in capsys.readouterr().out


def test_without_verls_profiler_set_up_one_line_names_the_overrides(tmp_path):
    done, data = _run(tmp_path, "no-tool")
    assert json.loads(done.stdout.splitlines()[-1]) is None  # verl's config untouched
    assert "global_profiler.tool=torch" in done.stderr and sc.ENV_CAPTURE_NEXT in done.stderr
    (stall,) = [s for s in read_file(data / sc.TRACES_FILE).spans if s.name == sc.SPAN_STALL]
    assert stall.attributes.get(sc.ATTR_STALL_NEXT_PROFILE, "") == ""
