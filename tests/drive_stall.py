"""A trainer process that hangs in a phase until it is killed: the runtime and the step tracer used directly, as
the hooks would (tests/test_stall_doctor.py SIGKILLs it once its stall evidence is out).

Usage: python drive_stall.py
"""

import time

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel.telemetry.steps import RunInfo


def score_with_remote_judge() -> None:  # the user's code the stall must point at
    while True:
        time.sleep(0.2)


TRACER = trackers.current().steps
TRACER.fit_started(RunInfo("v1", "proj", "exp", 3, 2, 4), lambda: 7)
TRACER.phase_enter(sc.VERL_TIMER_STEP)
TRACER.phase_enter(next(k for k, v in sc.VERL_TIMER_TO_PHASE.items() if v == sc.PHASE_REWARD))
print("HANGING", flush=True)
score_with_remote_judge()
