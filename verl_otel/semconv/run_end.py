"""How a run ended: the attributes an abrupt end leaves on the open step and its open phases (a query finds
the run's end by ``verl_otel.run_end.reason``), the reasons, and the note a signalled driver leaves behind."""

from __future__ import annotations

from typing import Final

#: on the step span and each phase span an abrupt end closed: what ended them (one of RUN_END_REASONS)
ATTR_RUN_END_REASON: Final = "verl_otel.run_end.reason"
#: the detail: the signal's name (SIGTERM), the exception's type and message, Ray's error text
ATTR_RUN_END_DETAIL: Final = "verl_otel.run_end.detail"
#: the innermost phase open when it ended (on the step span)
ATTR_RUN_END_PHASE: Final = "verl_otel.run_end.phase"
#: the process that reported it: process role (a lost worker's Ray actor class: Ray names no more), pid and host (of
#: the process that sent or got the end, when known)
ATTR_RUN_END_PROCESS_ROLE: Final = "verl_otel.run_end.process_role"
#: the process role's key before 0.1.0's rename (``role`` is verl's actor/critic/ref): written too for a release
ATTR_DEPRECATED_RUN_END_ROLE: Final = "verl_otel.run_end.role"
ATTR_RUN_END_PID: Final = "verl_otel.run_end.pid"
ATTR_RUN_END_HOST: Final = "verl_otel.run_end.host"

#: SIGINT (Ctrl-C to the run's process group, or a driver interrupted before Ray ended the trainer)
END_INTERRUPTED: Final = "interrupted"
#: SIGTERM (a scheduler's time limit, Ray ending the actor)
END_TERMINATED: Final = "terminated"
#: a worker process died under the call (Ray's ActorDiedError / worker crash: SIGKILL, OOM, a lost node)
END_WORKER_LOST: Final = "worker_lost"
#: out of memory, where Ray or the kernel says so
END_OOM: Final = "out_of_memory"
#: an exception raised through fit() (its type is the detail)
END_EXCEPTION: Final = "exception"
RUN_END_REASONS: Final = (END_INTERRUPTED, END_TERMINATED, END_WORKER_LOST, END_OOM, END_EXCEPTION)

#: $VERL_OTEL_DIR/ends/<host>-<pid>.json: a signalled driver's note (signal, time, pid, host), read by the trainer
#: when Ray ends it moments later (its SIGTERM is then the driver's interrupt) and by ``doctor``
ENDS_DIR: Final = "ends"
#: a trainer's SIGTERM within this many seconds of a driver's SIGINT note is that interrupt
END_NOTE_FRESH_S: Final = 30.0

#: Ray's exceptions that mean a worker process is gone (SIGKILL, the OOM killer, a lost node), by class name
RAY_WORKER_LOST_ERRORS: Final = frozenset(
    ("ActorDiedError", "RayActorError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError")
)
#: Ray's out-of-memory error (its memory monitor killed the worker), and what its or the kernel's text says
RAY_OOM_ERRORS: Final = frozenset(("OutOfMemoryError",))
OOM_MARKERS: Final = ("killed due to memory pressure", "OutOfMemoryError", "out of memory (OOM)")
#: what Ray's text says when a worker process is gone, whatever wraps its error (a RayTaskError, verl's own)
WORKER_LOST_MARKERS: Final = (
    "ActorDiedError",
    "The actor died",
    "actor is dead",
    "worker process has died",
    "Worker unexpectedly exits",
    "RayActorError",
)
