"""A trainer process in step 2, phase update_actor: the runtime and the step tracer used directly, as the hooks
would (tests/test_run_end.py). Modes:

- ``signal``: the main thread held where Python runs no signal handler (as in ``ray.get``); the test sends SIGTERM
  or SIGINT and SIGKILLs the process moments later, as Ray does: only the end watch can write the step in between;
- ``exit``: the main thread free, so the process' own SIGTERM handler (as Ray's) runs and exits 3;
- ``lost``: the update's worker dies under it (an exception named as Ray's ActorDiedError, with Ray's text);
- ``clean``: the step ends, its metrics logged;
- ``thread``: the trainer made and run on a thread that is not the main one (an async Ray actor's methods: the
  signal watch cannot be installed there); only a driver's note can end its step.

Usage: python drive_abrupt.py MODE
"""

import signal
import sys
import threading
import time

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel.process.ends import WATCH
from verl_otel.telemetry.steps import RunInfo

MODE = sys.argv[1]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))  # as a Ray worker's (Ray's handler exits 1)


def _in_update() -> tuple:
    m = trackers.current()
    m.wire(sc.PROCESS_ROLE_TRAINER)
    tracer = m.steps
    tracer.fit_started(RunInfo("v1", "proj", "exp", 3, 2, 4), lambda: 2)
    tracer.phase_enter(sc.VERL_TIMER_STEP)
    tracer.phase_exit(tracer.phase_enter("gen"), None)
    return tracer, tracer.phase_enter("update_actor")


if MODE == "thread":
    made: list[tuple] = []
    th = threading.Thread(target=lambda: made.append(_in_update()))
    th.start()
    th.join()
    print("IN_STEP", flush=True)
    time.sleep(60)
WATCH.install()  # as when verl's modules are imported: before the trainer's role listens (and polls)
TRACER, update = _in_update()


class ActorDiedError(Exception):  # Ray's, by name and text (ray/exceptions.py)
    pass


if MODE == "lost":
    died = ActorDiedError(
        "The actor died unexpectedly before finishing this task.\n\tclass_name: WorkerDict\n\tactor_id: 7f00\n"
        "\tpid: 4242\n\tip: 10.0.0.7\nThe actor is dead because its worker process has died. Worker exit type: "
        "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2."
    )
    try:  # raised, as ray.get raises it: its traceback is the step's last frames
        raise died
    except ActorDiedError:
        pass
    TRACER.phase_exit(update, died)
    TRACER.fit_ended(died)
    sys.exit(1)
if MODE == "clean":
    TRACER.phase_exit(update, None)
    TRACER.metrics_logged({"training/global_step": 2}, 2)
    TRACER.fit_ended(None)
    sys.exit(0)
if MODE == "signal":  # the main thread runs no handler now: only the end watch's thread sees the signal
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
print("IN_STEP", flush=True)
time.sleep(60)
