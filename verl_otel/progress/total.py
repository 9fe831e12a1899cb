"""The [VERL_PROGRESS] manager-level rollout bar: the samples finished by all agent-loop workers of one dispatch.

The dispatching process (the trainer) asks the workers for their counts with :meth:`TotalBar.ask` (the hooks'
subclass asks each worker actor through Ray's own ``__ray_call__``: no port of ours, so it works in
console-only mode, and verl's dispatch is unchanged). One daemon thread polls while a dispatch is
unfinished; the training thread only registers the dispatch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verl_otel._log import warn_once
from verl_otel.config import ProgressSettings
from verl_otel.progress.console import rollout_line

POLL_S = 1.0
MAX_TIMEOUTS = 5


@dataclass
class _Dispatch:
    workers: Sequence[Any]
    mode: str
    step: int
    total: int
    start: float
    printed: int = -1  # the last count printed
    timeouts: int = 0  # polls in a row the workers did not answer in time


class TotalBar:
    """The bar of one process; :meth:`ask` is how it reads the workers' counts."""

    def __init__(self, progress: ProgressSettings, poll_s: float = POLL_S) -> None:
        self._s = progress
        self._poll_s = poll_s
        self._lock = threading.Condition()
        self._active: dict[tuple[str, int], _Dispatch] = {}  # (mode, step) -> its unfinished dispatch
        self._thread: threading.Thread | None = None

    def dispatched(self, workers: Sequence[Any], mode: str, step: int, samples: int) -> None:
        """The manager sent ``samples`` samples of ``mode`` out to ``workers`` (never blocks)."""
        if not workers or samples <= 0 or not self._s.step_selected(step):
            return
        with self._lock:
            cur = self._active.get((mode, step))
            if cur is not None:  # more prompts for the same step (a refill)
                cur.total += samples
            else:
                # a dispatch the workers' counts never completed (async trainers move a worker's rollout on to
                # the next step) stops being polled two steps later
                for key in [k for k in self._active if k[0] == mode and k[1] < step - 1]:
                    self._active.pop(key)
                self._active[(mode, step)] = _Dispatch(list(workers), mode, step, samples, time.monotonic())
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="verl-otel-rollout-total", daemon=True)
                self._thread.start()
            self._lock.notify()

    def returned(self, mode: str, step: int) -> None:
        """verl's manager call returned with every sample (legacy): the last line, without asking the workers."""
        with self._lock:
            d = self._active.get((mode, step))
        if d is not None:
            self._report(d, d.total)

    def _run(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: bool(self._active))
                active = list(self._active.values())
            for dispatch in active:
                try:
                    self._poll(dispatch)
                    dispatch.timeouts = 0
                except Exception as exc:  # noqa: BLE001 - the bar is off, training goes on
                    # busy workers (their first call, a loaded machine) answer late: asked again next time
                    if self.late(exc) and dispatch.timeouts < MAX_TIMEOUTS:
                        dispatch.timeouts += 1
                        continue
                    warn_once("rollout-total", f"cannot read the agent-loop workers' progress ({exc!r})")
                    with self._lock:
                        self._active.pop((dispatch.mode, dispatch.step), None)
            time.sleep(self._poll_s)

    def ask(self, workers: Sequence[Any], mode: str) -> list[tuple[int, int]]:
        """Each worker's (step, finished samples) of its current rollout of ``mode``."""
        return []

    def late(self, exc: BaseException) -> bool:
        """``exc`` says the workers answered too late (asked again, up to MAX_TIMEOUTS times in a row)."""
        return False

    def stop(self) -> None:
        """Forget every dispatch (its thread then waits for none)."""
        with self._lock:
            self._active.clear()

    def _poll(self, d: _Dispatch) -> None:
        counts = self.ask(d.workers, d.mode)
        self._report(d, sum(n for step, n in counts if step == d.step))

    def _report(self, d: _Dispatch, done: int) -> None:
        done = min(d.total, done)
        finished = done >= d.total
        every = self._s.rollout_interval
        with self._lock:
            if d.printed >= done or not (finished or done // every != max(d.printed, 0) // every):
                return
            d.printed = done
            if finished and self._active.get((d.mode, d.step)) is d:
                self._active.pop((d.mode, d.step))
        print(
            rollout_line(d.step, None, d.mode, done, d.total, time.monotonic() - d.start, self._s.rollout_bar_width),
            flush=True,
        )
