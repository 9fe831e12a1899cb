"""The stall watch (telemetry/stalls.py) around hooked calls outside the trainer's phases: a reward call, an
agent-loop sample, a rollout server request. Only a start time goes into a dict here; the runtime's watch
thread does the rest."""

from __future__ import annotations

from verl_otel import runtime


def watch(call: str, traceparent: str | None) -> int | None:
    """The watch's token for a call named ``call`` (its stall span goes under ``traceparent``); None when off."""
    stalls = runtime.current().stalls
    if stalls is None:
        return None
    from verl_otel.telemetry.propagation import extract

    return stalls.enter(call, parent=extract(traceparent) if traceparent else None)


def unwatch(token: int | None, _exc: BaseException | None = None) -> None:
    """The call ended (``on_exit`` passes what it raised)."""
    if token is None:
        return
    stalls = runtime.current().stalls
    if stalls is not None:
        stalls.exit(token)
