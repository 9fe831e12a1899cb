"""The stall watch (process/stalls.py) around hooked calls outside the trainer's phases: a reward call, an
agent-loop sample, a rollout server request, a worker's side of a weight sync. Only a start time goes into a
dict here; the runtime's watch thread does the rest."""

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
