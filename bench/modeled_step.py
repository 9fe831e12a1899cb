"""A realistic step, modeled: verl's real ``marked_timer`` phases and ``Tracking.log`` around sleeps that
stand for the GPU work, plus a rollout of N samples through the real rollout tracker (as the
agent-loop hook does per sample). Run with telemetry off or on (the environment decides, as in a
user's run); prints the wall time of the steps.

Usage: python modeled_step.py STEPS STEP_SECONDS SAMPLES
"""

from __future__ import annotations

import sys
import time
from typing import ClassVar

from verl.utils.profiler import marked_timer
from verl.utils.tracking import Tracking

# fractions of a step, roughly what a GRPO step on GPUs spends per phase
PHASES = {
    "gen": 0.45,
    "reward": 0.02,
    "old_log_prob": 0.08,
    "ref": 0.08,
    "adv": 0.01,
    "update_actor": 0.30,
    "update_weights": 0.06,
}


class TrainerState:
    """Only what verl-otel reads from a trainer: global_steps and config."""

    global_steps = 0
    total_training_steps = None
    config: ClassVar[dict] = {
        "trainer": {"project_name": "bench", "experiment_name": "modeled", "total_training_steps": 0},
        "data": {"train_batch_size": 64},
        "actor_rollout_ref": {"rollout": {"n": 8}},
    }


def main() -> None:
    steps, step_s, samples = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    from verl_otel.config import enabled

    on = enabled()
    trainer = TrainerState()
    if on:
        from verl_otel import trackers
        from verl_otel.hooks import trainer as hooks

        TRACKER, TRACER = trackers.current().rollout, trackers.current().steps  # noqa: N806

        hooks.declare_run(trainer)
        hooks.start_fit(trainer, "bench")
    logger = Tracking(project_name="bench", experiment_name="modeled", default_backend=[])
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        trainer.global_steps = step
        timing: dict[str, float] = {}
        with marked_timer("step", timing):
            for phase, frac in PHASES.items():
                with marked_timer(phase, timing):
                    if phase == "gen" and on:
                        TRACKER.batch_started("train", step, samples, None)
                        per = step_s * frac / samples
                        for _ in range(samples):
                            tok = TRACKER.sample_started("train")
                            time.sleep(per)
                            TRACKER.sample_finished("train", tok, {"step": step}, None)
                    elif phase == "gen":
                        per = step_s * frac / samples
                        for _ in range(samples):
                            time.sleep(per)
                    else:
                        time.sleep(step_s * frac)
        logger.log(
            {"critic/score/mean": 0.5, "timing_s/step": timing["step"], **{f"k/{i}": i for i in range(100)}}, step=step
        )
    wall = time.perf_counter() - t0
    if on:
        TRACER.fit_ended(None)
    print(f"MODELED_WALL {wall:.6f}")


if __name__ == "__main__":
    main()
