"""The stall watch (process/stalls.py) around hooked calls outside the trainer's phases: a reward call, an
agent-loop sample, a rollout server request, a worker's side of a weight sync; and the calls a process sends to
others (whom a phase that stalls meanwhile waits on). Only a start time goes into a dict here; the runtime's
watch thread does the rest."""

from __future__ import annotations

from verl_otel import trackers


def watch(call: str, traceparent: str | None, phase: str | None = None, step: int = -1) -> int | None:
    """The watch's token for a call named ``call`` (its stall span goes under ``traceparent``), of the trainer's
    ``phase`` when it is part of one (default: its own name) and ``step`` when known; None when off."""
    stalls = trackers.current().services.stalls()
    if stalls is None:
        return None
    from verl_otel.telemetry.propagation import extract

    parent = extract(traceparent) if traceparent else None
    return stalls.enter(phase or call, call=call, step=step, parent=parent)


def unwatch(token: int | None, _exc: BaseException | None = None) -> None:
    """The call ended (``on_exit`` passes what it raised)."""
    if token is None:
        return
    stalls = trackers.current().services.stalls()
    if stalls is not None:
        stalls.exit(token)


def sent(process_role: str, method: str, ranks: int | None, blocking: bool) -> int | None:
    """This thread called ``method`` on ``ranks`` processes of ``process_role`` (``2 agent_loop_worker calls
    generate_sequences, ranks 0-1``): a call that stalls here meanwhile waits on them. The token for :func:`answered`;
    None when off."""
    from verl_otel.process.stall_record import sent_text

    stalls = trackers.current().services.stalls()
    return None if stalls is None else stalls.send(sent_text(process_role, method, ranks), blocking)


def answered(token: int | None) -> None:
    """The sending call returned (a non-blocking one's futures are still waited on: process/stalls.py)."""
    stalls = trackers.current().services.stalls()
    if stalls is not None:
        stalls.answered(token)
