"""Smoke test of ``verl-otel demo`` itself: verl's real entry point (python -m verl.trainer.main_ppo) runs to
completion on the CPU for both trainers, writes its checkpoint, and ``--slow`` delays the phase it names inside
the real worker. Asserts on verl's own console output only (not on our telemetry); the runs are the e2e
session's (conftest fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.verl_log import step_metrics

pytestmark = pytest.mark.verl

SLOW_S = 3.0  # both runs are made with --slow update_actor@3=3


def test_step_metrics_parser():
    log = (
        "\x1b[36m(TaskRunnerV1 pid=1)\x1b[0m step:2 - actor/entropy:4.96 - timing_s/update_actor:3.1e+00 - "
        "val-core/openai/gsm8k/acc/mean@1:np.float64(0.5) - training/global_step:2\n"
        "(TaskRunner pid=2) step:0 - val-aux/num_turns/min:np.int32(2)\n"
    )
    got = step_metrics(log)
    assert got[2]["timing_s/update_actor"] == 3.1 and got[2]["val-core/openai/gsm8k/acc/mean@1"] == 0.5
    assert got[2]["training/global_step"] == 2 and got[0]["val-aux/num_turns/min"] == 2


@pytest.mark.parametrize("run_name", ["v1_run", "legacy_run"])
def test_demo_runs_verl_to_completion(request, run_name):
    run = request.getfixturevalue(run_name)
    trainer, out, steps = run.trainer, run.out, run.steps
    log = (out / "demo.log").read_text(errors="replace")
    assert run.rc == 0, log[-4000:]

    runner = "TaskRunnerV1" if trainer == "v1" else "TaskRunner"
    assert f"({runner} pid=" in log, f"fit() did not run in verl's {runner} actor"
    metrics = step_metrics(log)
    assert set(metrics) >= {0, 1, steps}, sorted(metrics)  # validation before training, then every step
    last = metrics[steps]
    assert last.get("training/global_step") == steps, sorted(last)
    assert any(k.startswith("val-core/") for k in last), "validation at the last step"
    assert "actor/pg_loss" in last and "timing_s/update_weights" in last

    ckpt = out / "checkpoints"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(steps)
    assert (ckpt / f"global_step_{steps}" / "actor").is_dir()

    # --slow update_actor@K=3 slept inside the real FSDP worker's update of step K, and only there
    slow, fast = metrics[run.slow_step("update_actor")]["timing_s/update_actor"], metrics[1]["timing_s/update_actor"]
    assert slow >= SLOW_S and slow - fast >= 0.8 * SLOW_S, (fast, slow)

    assert (out / "assets" / "tiny_model" / "config.json").exists()


def test_cli_rejects_a_bad_slow_spec(tmp_path, capsys):
    from verl_otel.demo.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["--out", str(tmp_path), "--slow", "nope@1=2"])
    assert exit_.value.code == 2  # an argparse error, before anything is imported or built
    assert "bad --slow" in capsys.readouterr().err
    assert not any(Path(tmp_path).iterdir()), "nothing is built or run for a bad spec"
