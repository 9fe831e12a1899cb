"""Console lines: the embedded default's one line per step (step, duration, slowest phase, and what
a trainer kind adds: fully_async's parameter version and staleness), and fully_async's rollouter's line per
parameter-version window."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from verl_otel.telemetry.step_events import RunInfo, StepObserver, StepResult

#: a note appended to the step line (``" | note"``) when it returns text (fully_async's parameter version)
Note = Callable[[], "str | None"]


def step_line(result: StepResult, planned: int | None, notes: Sequence[Note] = ()) -> str:
    of = f"/{planned}" if planned else ""
    line = f"[verl-otel] step {result.global_step}{of} took {result.seconds:.1f}s"
    if result.phases:
        slowest = max(result.phases, key=result.phases.__getitem__)
        share = result.phases[slowest] / result.seconds * 100 if result.seconds > 0 else 0.0
        line += f", slowest phase {slowest} {result.phases[slowest]:.1f}s ({share:.0f}%)"
    if result.error:
        line += " [ERROR]"
    for note in list(notes):
        try:
            text = note()
        except Exception:  # noqa: BLE001 - a note never costs the line
            text = None
        if text:
            line += f" | {text}"
    return line


class StepConsole(StepObserver):
    """Prints :func:`step_line` at each step end, with the ``notes`` the trainer kind added."""

    def __init__(self, notes: Sequence[Note] = (), stream: TextIO | None = None) -> None:
        self._stream = stream
        self._planned: int | None = None
        self.notes = notes

    def on_fit_start(self, run: RunInfo) -> None:
        self._planned = run.steps_planned

    def on_step_end(self, result: StepResult) -> None:
        print(step_line(result, self._planned, self.notes), file=self._stream or sys.stdout, flush=True)


def window_line(version: int, queued: int, dropped: int, idle: float | None) -> str:
    idle_text = f", idle {idle:.0%}" if idle is not None else ""
    return f"[verl-otel] rollouter param version {version}: {queued} samples queued, {dropped} dropped{idle_text}"


class WindowConsole:
    """Prints :func:`window_line` as each rollouter window closes (a ``RolloutWindows.on_window_closed`` callback)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream

    def __call__(self, version: int, queued: int, dropped: int, idle: float | None) -> None:
        print(window_line(version, queued, dropped, idle), file=self._stream or sys.stdout, flush=True)
