"""Drives verl's real timer and Tracking.log through verl-otel's hooks, as a trainer would, in a
fresh process activated by the environment alone (the .pth start-up hook). Used by unit tests:
the full trainer runs are in test_e2e_*.py.

Usage: python drive_hooks.py STEPS [FAIL_PHASE]
"""

import json
import os
import sys
import threading
import time
from typing import ClassVar

from verl.utils.profiler import marked_timer
from verl.utils.tracking import Tracking, ValidationGenerationsLogger

import verl_otel.hooks.registry as registry
from verl_otel import trackers
from verl_otel.hooks import trainer as trainer_hooks


def listening_sockets() -> int:
    """TCP sockets this process listens on (its /metrics server, if any), from /proc."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        count += sum(1 for r in rows if r.split()[3] == "0A" and r.split()[9] in mine)  # 0A: LISTEN
    return count


class FakeTrainerState:
    """Only the attributes verl-otel reads from a trainer (global_steps, config)."""

    global_steps = 0
    total_training_steps = None
    config: ClassVar[dict] = {
        "trainer": {"project_name": "proj", "experiment_name": "exp", "total_training_steps": 2},
        "data": {"train_batch_size": 4},
        "actor_rollout_ref": {"rollout": {"n": 2}},
    }


def main() -> None:
    steps = int(sys.argv[1])
    fail_phase = sys.argv[2] if len(sys.argv) > 2 else None
    assert "verl.utils.profiler.performance._timer" in registry.installed(), registry.installed()
    trainer = FakeTrainerState()
    trainer_hooks.declare_run(trainer)
    trainer_hooks.start_fit(trainer, "legacy")
    logger = Tracking(project_name="proj", experiment_name="exp", default_backend=["console"])
    err = None
    most_threads = 0
    step_end_s = 0.0
    try:
        for step in range(1, steps + 1):
            most_threads = max(most_threads, sum(t.name.startswith("verl-otel") for t in threading.enumerate()))
            trainer.global_steps = step
            timing = {}
            with marked_timer("step", timing):
                sync = ("update_weights",) if os.environ.get("DRIVE_WEIGHT_SYNC") else ()
                for phase in ("gen", "old_log_prob", "adv", "update_actor", *sync):
                    with marked_timer(phase, timing):
                        time.sleep(0.01)
                        if phase == fail_phase and step == steps:
                            raise RuntimeError(
                                f"boom in {phase} " + "x" * (200_000 if os.environ.get("DRIVE_BIG_ERROR") else 0)
                            )
            with marked_timer("testing", timing):
                time.sleep(0.01)
                samples = [("what is 1 plus 2 ?" * 200, "3 #### 3", 1.0), ("q2", "a2", 0.0)]
                ValidationGenerationsLogger(project_name="proj", experiment_name="exp").log(["console"], samples, step)
                # verl's _validate returns its metrics, whose keys name the data sources it scored
                trainer_hooks.validate_wrapper(
                    lambda: {"val-core/openai/gsm8k/reward/mean@1": 0.5, "val-aux/math/acc/best@2/std": 0.1},
                    trainer,
                    (),
                    {},
                )
            t0 = time.monotonic()
            logger.log(
                {
                    "critic/score/mean": 0.25 * step,
                    "timing_s/step": timing["step"],
                    "response_length/mean": 7.0,
                    "perf/throughput": 100.0,
                },
                step=step,
            )
            step_end_s = max(step_end_s, time.monotonic() - t0)  # the step ends here (trace, flush request)
    except RuntimeError as e:
        err = e
    finally:
        t0 = time.monotonic()
        trackers.current().steps.fit_ended(err)
        fit_end_s = time.monotonic() - t0
    # what the training thread waited for, and how many threads of ours ever ran at once
    print(
        "DRIVE_STATS "
        + json.dumps(
            {
                "most_threads": most_threads,
                "step_end_s": step_end_s,
                "fit_end_s": fit_end_s,
                "listening": listening_sockets(),
            }
        ),
        flush=True,
    )
    print("DRIVE_DONE", flush=True)


if __name__ == "__main__":
    main()
