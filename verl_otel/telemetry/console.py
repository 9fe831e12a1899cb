"""Console lines: the embedded default's one line per step (step, duration, slowest phase, and what
a trainer kind adds: fully_async's parameter version and staleness)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from verl_otel.telemetry.steps import RunInfo, StepObserver, StepResult

#: Notes appended to the step line (``" | note"``) when they return text; registered by trainer kinds.
STEP_NOTES: list[Callable[[], str | None]] = []


def step_line(result: StepResult, planned: int | None) -> str:
    of = f"/{planned}" if planned else ""
    line = f"[verl-otel] step {result.global_step}{of} took {result.seconds:.1f}s"
    if result.phases:
        slowest = max(result.phases, key=result.phases.__getitem__)
        share = result.phases[slowest] / result.seconds * 100 if result.seconds > 0 else 0.0
        line += f", slowest phase {slowest} {result.phases[slowest]:.1f}s ({share:.0f}%)"
    if result.error:
        line += " [ERROR]"
    for note in list(STEP_NOTES):
        try:
            text = note()
        except Exception:  # noqa: BLE001 - a note never costs the line
            text = None
        if text:
            line += f" | {text}"
    return line


class StepConsole(StepObserver):
    """Prints :func:`step_line` at each step end."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._planned: int | None = None

    def on_fit_start(self, run: RunInfo) -> None:
        self._planned = run.steps_planned

    def on_step_end(self, result: StepResult) -> None:
        print(step_line(result, self._planned), file=self._stream or sys.stdout, flush=True)
