"""The [VERL_PROGRESS] bars and lines of the worker processes, as observers of their trackers: the actor/critic
update bar (telemetry/update.py), an agent-loop worker's rollout bar (telemetry/rollout.py) and a training
worker's rank-0 start/done lines of one call."""

from __future__ import annotations

import time
from typing import Any

from verl_otel.config import ProgressSettings
from verl_otel.progress.console import rollout_line, update_line, worker_line
from verl_otel.telemetry.rollout import Batch
from verl_otel.telemetry.update import Update


class UpdateBar:
    """The actor/critic bar: a line every ``bar_interval`` mini-batches and at the end, for the selected steps.
    An ``UpdateTracker.on_progress`` callback."""

    def __init__(self, progress: ProgressSettings) -> None:
        self.progress = progress

    def __call__(self, role: str, upd: Update) -> None:
        if not self.progress.step_selected(upd.step):
            return
        if upd.completed % self.progress.bar_interval == 0 or upd.completed >= upd.expected:
            epoch, mini = upd.last_done()
            print(
                update_line(
                    role,
                    upd.label,
                    upd.completed,
                    upd.expected,
                    time.monotonic() - upd.start,
                    epoch,
                    upd.epochs,
                    mini,
                    upd.per_epoch,
                ),
                flush=True,
            )


class RolloutBar:
    """An agent-loop worker's bar: a line every ``rollout_interval`` finished samples and at the end. A
    ``RolloutTracker.on_progress`` callback (fully_async's samples are selected by parameter version)."""

    def __init__(self, progress: ProgressSettings) -> None:
        self.progress = progress

    def __call__(self, worker: int | None, batch: Batch) -> None:
        progress = self.progress
        if (batch.completed % progress.rollout_interval == 0 or batch.done) and progress.step_selected(
            batch.step if batch.version is None else batch.version
        ):
            print(
                rollout_line(
                    batch.step,
                    worker,
                    batch.mode,
                    batch.completed,
                    batch.expected,
                    time.monotonic() - batch.start,
                    progress.rollout_bar_width,
                    batch.version,
                ),
                flush=True,
            )


class WorkerCallLines:
    """``with lines:`` prints a training worker's start line of one call and, when it returns, its done line
    (rank 0, the selected steps); ``step`` None: the batch did not say it (no step tag)."""

    def __init__(self, step: int | None, role: str, strategy: str, method: str) -> None:
        self.step, self.role, self.strategy, self.method = step, role, strategy, method
        self.t0 = time.monotonic()

    def __enter__(self) -> None:
        print(worker_line(self.step, self.role, self.strategy, 0, self.method), flush=True)
        self.t0 = time.monotonic()

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            seconds = time.monotonic() - self.t0
            print(worker_line(self.step, self.role, self.strategy, 0, self.method, seconds), flush=True)
