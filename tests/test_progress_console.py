"""The seed's phase lines from the step tracer's events: details, held start lines, per-phase heartbeat."""

import io
import re
import time

from verl_otel import config
from verl_otel.progress import console as pc
from verl_otel.progress.console import ProgressConsole


def _console(**env: str) -> tuple[ProgressConsole, io.StringIO]:
    out = io.StringIO()
    settings = config.load_progress({"VERL_PROGRESS_LOG": "1", "VERL_PROGRESS_HEARTBEAT_SEC": "100", **env})
    return ProgressConsole(settings, stream=out), out


def test_rollout_start_waits_for_the_dispatch_details():
    console, out = _console()
    console.on_phase_start("rollout", 8)  # legacy: verl's gen timer opens before the manager's call
    assert out.getvalue() == ""
    console.note("rollout", 8, pc.rollout_details((128, 1024), 4, ["global_steps", "temperature"], 6))
    console.on_phase_end("rollout", 8, 2.0, "0" * 32)
    assert out.getvalue().splitlines() == [
        "[VERL_PROGRESS][step=8] rollout start: prompts_shape=(128, 1024), rollout_n=4, "
        "meta_keys=['global_steps', 'temperature']",
        "[VERL_PROGRESS][step=8] rollout done: 2.00s",
    ]


def test_details_noted_before_the_phase_and_a_start_without_details():
    console, out = _console()
    console.note("rollout", 2, "prompts_shape=(4,), rollout_n=2, meta_keys=[]")  # v1 dispatches first
    console.on_phase_start("rollout", 2)
    console.on_phase_start("rollout", 3)  # no details ever come: printed plainly before the next line
    console.on_phase_end("rollout", 3, 1.0, "0" * 32)
    assert out.getvalue().splitlines() == [
        "[VERL_PROGRESS][step=2] rollout start: prompts_shape=(4,), rollout_n=2, meta_keys=[]",
        "[VERL_PROGRESS][step=3] rollout start",
        "[VERL_PROGRESS][step=3] rollout done: 1.00s",
    ]


def test_reward_done_names_time_and_extra_keys():
    console, out = _console()
    console.on_phase_start("reward", 8)
    console.note("reward", 8, pc.key_preview({"reward": [1.0], "acc": [0.0]}, 6))
    console.on_phase_end("reward", 8, 0.013, "0" * 32)
    assert (
        out.getvalue().splitlines()[-1]
        == "[VERL_PROGRESS][step=8] reward done: reward_time=0.01s, reward_extra_keys=['reward', 'acc']"
    )


def test_meta_preview_limit():
    assert pc.key_preview(["a", "b", "c", pc.sc.TRACEPARENT_KEY], 2) == "['a', 'b', ...]"
    assert pc.key_preview([], 6) == "[]" and pc.key_preview(["a"], 0) == "[...]"


def test_heartbeat_one_timer_per_running_phase():
    console, out = _console(VERL_PROGRESS_HEARTBEAT_SEC="0.4")
    console.on_phase_start("rollout", 1)
    console.note("rollout", 1, "x")
    time.sleep(0.2)
    console.on_phase_start("old_log_prob", 1)  # short: ends before its first beat
    console.on_phase_end("old_log_prob", 1, 0.05, "0" * 32)
    time.sleep(0.8)
    console.on_phase_end("rollout", 1, 1.0, "0" * 32)
    beats = [x for x in out.getvalue().splitlines() if "running" in x]
    assert [re.sub(r"elapsed=[\d.]+s", "", x) for x in beats] == ["[VERL_PROGRESS][step=1] rollout gen running: "] * 2
    elapsed = [float(re.search(r"elapsed=([\d.]+)s", x).group(1)) for x in beats]
    assert abs(elapsed[0] - 0.4) < 0.15 and abs(elapsed[1] - 0.8) < 0.15, elapsed  # from the phase's own start


def test_log_interval_applies_to_heartbeat_and_details():
    console, out = _console(VERL_PROGRESS_LOG_INTERVAL="2", VERL_PROGRESS_HEARTBEAT_SEC="0.1")
    console.on_phase_start("rollout", 3)
    console.note("rollout", 3, "x")
    time.sleep(0.25)
    console.on_phase_end("rollout", 3, 0.25, "0" * 32)
    assert out.getvalue() == ""


def test_fully_async_lines_say_the_parameter_version():
    assert pc.rollout_line(-1, 0, "train", 1, 2, 1.0, 4, version=3).startswith(
        "[VERL_PROGRESS][param_version=3][rollout_worker=0][train] [##--] 1/2 (50.0%)"
    )
    assert (
        pc.worker_line(None, "actor", "dp", 0, "update_actor", 0.5)
        == "[VERL_PROGRESS][actor=dp][rank=0] update_actor done: 0.50s"
    )
    assert (
        pc.worker_line(4, "ref", "megatron", 0, "compute_ref_log_prob")
        == "[VERL_PROGRESS][step=4][ref=megatron][rank=0] compute_ref_log_prob start"
    )
    assert [pc.strategy_label(s) for s in ("fsdp", "fsdp2", "megatron", None)] == ["dp", "dp", "megatron", "dp"]
