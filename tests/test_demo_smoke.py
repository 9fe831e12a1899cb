"""Smoke test of ``verl-otel demo`` itself: verl's real entry point (python -m verl.trainer.main_ppo) runs to
completion on the CPU for both trainers, writes its checkpoint, and ``--slow`` delays the phase it names inside
the real worker. Asserts on verl's own console output only (not on our telemetry)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import clean_env

pytestmark = pytest.mark.verl

STEPS = 2
SLOW_S = 3.0
_STEP_LINE = re.compile(r"(?:^|\s)step:(\d+) - (.*)$", re.M)


def step_metrics(log: str) -> dict[int, dict[str, float]]:
    """verl's per-step console line (``step:N - key:value - ...``, behind Ray's ``(TaskRunner pid=..)`` prefix)."""
    out: dict[int, dict[str, float]] = {}
    for m in _STEP_LINE.finditer(log):
        metrics = out.setdefault(int(m[1]), {})
        for part in m[2].split(" - "):
            key, _, value = part.strip().rpartition(":")
            number = re.fullmatch(r"(?:np\.\w+\()?([-+0-9.eE]+|nan|inf)\)?", value)
            if key and number:
                metrics[key] = float(number[1])
    return out


def test_step_metrics_parser():
    log = ("\x1b[36m(TaskRunnerV1 pid=1)\x1b[0m step:2 - actor/entropy:4.96 - timing_s/update_actor:3.1e+00 - "
           "val-core/openai/gsm8k/acc/mean@1:np.float64(0.5) - training/global_step:2\n"
           "(TaskRunner pid=2) step:0 - val-aux/num_turns/min:np.int32(2)\n")
    got = step_metrics(log)
    assert got[2]["timing_s/update_actor"] == 3.1 and got[2]["val-core/openai/gsm8k/acc/mean@1"] == 0.5
    assert got[2]["training/global_step"] == 2 and got[0]["val-aux/num_turns/min"] == 2


@pytest.mark.parametrize("trainer", ["v1", "legacy"])
def test_demo_runs_verl_to_completion(trainer, tmp_path, monkeypatch):
    from verl_otel.demo.runner import run_demo

    keep = clean_env()
    for key in list(os.environ):  # the demo's environment is a user's: no telemetry settings leak from here
        if key not in keep:
            monkeypatch.delenv(key)
    out = tmp_path / trainer
    rc = run_demo(steps=STEPS, out=out, trainer=trainer, slow=[f"update_actor@{STEPS}={SLOW_S:g}"], quiet=True)
    log = (out / "demo.log").read_text(errors="replace")
    assert rc == 0, log[-4000:]

    runner = "TaskRunnerV1" if trainer == "v1" else "TaskRunner"
    assert f"({runner} pid=" in log, f"fit() did not run in verl's {runner} actor"
    metrics = step_metrics(log)
    assert set(metrics) >= {0, 1, STEPS}, sorted(metrics)  # validation before training, then every step
    last = metrics[STEPS]
    assert last.get("training/global_step") == STEPS, sorted(last)
    assert any(k.startswith("val-core/") for k in last), "validation at the last step"
    assert "actor/pg_loss" in last and "timing_s/update_weights" in last

    ckpt = out / "checkpoints"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    assert (ckpt / f"global_step_{STEPS}" / "actor").is_dir()

    # --slow update_actor@2=3 slept inside the real FSDP worker's update of step 2, and only there
    slow, fast = metrics[STEPS]["timing_s/update_actor"], metrics[1]["timing_s/update_actor"]
    assert slow >= SLOW_S and slow - fast >= 0.8 * SLOW_S, (fast, slow)

    assert (out / "assets" / "tiny_model" / "config.json").exists()


def test_cli_rejects_a_bad_slow_spec(tmp_path, capsys):
    from verl_otel.demo.__main__ import main

    assert main(["--out", str(tmp_path), "--slow", "nope@1=2"]) == 2
    assert "bad --slow" in capsys.readouterr().out
    assert not any(Path(tmp_path).iterdir()), "nothing is built or run for a bad spec"
