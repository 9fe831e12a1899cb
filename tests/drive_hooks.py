"""Drives verl's real timer and Tracking.log through verl-otel's hooks, as a trainer would, in a
fresh process activated by the environment alone (the .pth start-up hook). Used by unit tests:
the full trainer runs are in test_e2e_*.py.

Usage: python drive_hooks.py STEPS [FAIL_PHASE]
"""

import sys
import time

from verl.utils.profiler import marked_timer
from verl.utils.tracking import Tracking, ValidationGenerationsLogger

import verl_otel.hooks.registry as registry
from verl_otel.telemetry.steps import TRACER
from verl_otel.hooks import trainer as trainer_hooks


class FakeTrainerState:
    """Only the attributes verl-otel reads from a trainer (global_steps, config)."""

    global_steps = 0
    total_training_steps = None
    config = {"trainer": {"project_name": "proj", "experiment_name": "exp", "total_training_steps": 2},
              "data": {"train_batch_size": 4}, "actor_rollout_ref": {"rollout": {"n": 2}}}


def main() -> None:
    steps = int(sys.argv[1])
    fail_phase = sys.argv[2] if len(sys.argv) > 2 else None
    assert "verl.utils.profiler.performance._timer" in registry.installed(), registry.installed()
    trainer = FakeTrainerState()
    trainer_hooks._wire_observers()
    TRACER.fit_started(trainer, "legacy")
    logger = Tracking(project_name="proj", experiment_name="exp", default_backend=["console"])
    err = None
    try:
        for step in range(1, steps + 1):
            trainer.global_steps = step
            timing = {}
            with marked_timer("step", timing):
                for phase in ("gen", "old_log_prob", "adv", "update_actor"):
                    with marked_timer(phase, timing):
                        time.sleep(0.01)
                        if phase == fail_phase and step == steps:
                            raise RuntimeError(f"boom in {phase}")
            with marked_timer("testing", timing):
                time.sleep(0.01)
                samples = [("what is 1 plus 2 ?" * 200, "3 #### 3", 1.0), ("q2", "a2", 0.0)]
                ValidationGenerationsLogger(project_name="proj", experiment_name="exp").log(["console"], samples, step)
                # verl's _validate returns its metrics, whose keys name the data sources it scored
                trainer_hooks._validate_wrapper(lambda: {"val-core/openai/gsm8k/reward/mean@1": 0.5,
                                                         "val-aux/math/acc/best@2/std": 0.1}, trainer, (), {})
            logger.log({"critic/score/mean": 0.25 * step, "timing_s/step": timing["step"],
                        "response_length/mean": 7.0, "perf/throughput": 100.0}, step=step)
    except RuntimeError as e:
        err = e
    finally:
        TRACER.fit_ended(err)
    print("DRIVE_DONE", flush=True)


if __name__ == "__main__":
    main()
