"""One flusher thread per process: every export flush happens here, never on a training thread.

A training thread only *asks* for a flush (:meth:`Flusher.request`: a counter under a condition, no I/O)
and, at fit end, waits for it with a deadline (:meth:`Flusher.wait`). Requests made while a flush runs
are coalesced into the next one, so a collector that never answers costs one stuck thread, not one per
step. The same thread runs the periodic tasks (emitting idle span groups) before each flush.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from verl_otel._log import warn_once

TICK_S = 0.5


class Flusher:
    def __init__(self, flush: Callable[[], None], tick_s: float = TICK_S) -> None:
        self._flush = flush
        self._tick_s = tick_s
        self._cond = threading.Condition()
        self._requested = 0
        self._done = 0
        self._tasks: list[Callable[[], object]] = []
        self._jobs: list[Callable[[], None]] = []
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def every_tick(self, task: Callable[[], object]) -> None:
        """Run ``task`` on the flusher thread about every tick (and before each flush)."""
        with self._cond:
            self._tasks.append(task)
            self._ensure_thread_locked()

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` once on the flusher thread (file I/O a training thread must not wait on)."""
        with self._cond:
            self._jobs.append(job)
            self._ensure_thread_locked()
            self._cond.notify_all()

    def request(self) -> int:
        """Ask for a flush of everything ended so far; returns a ticket for :meth:`wait`. Never blocks."""
        with self._cond:
            self._requested += 1
            ticket = self._requested
            self._ensure_thread_locked()
            self._cond.notify_all()
        return ticket

    def wait(self, ticket: int, timeout_s: float) -> bool:
        """Wait until the flush behind ``ticket`` finished, at most ``timeout_s``; True if it did."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            while self._done < ticket:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    @property
    def threads_started(self) -> int:
        return 0 if self._thread is None else 1

    def _ensure_thread_locked(self) -> None:
        if self._pid != os.getpid():  # a forked child: the parent's thread is not here
            self._pid, self._thread = os.getpid(), None
            self._done = self._requested = 0
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="verl-otel-flusher", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._requested > self._done or bool(self._jobs), timeout=self._tick_s)
                target = self._requested
                tasks = self._jobs + self._tasks
                self._jobs = []
            for task in tasks:
                try:
                    task()
                except Exception as exc:  # noqa: BLE001 - the flusher never dies of a telemetry error
                    warn_once(f"flusher-task:{task!r}", f"telemetry task failed: {exc!r}")
            if target > self._done:
                try:
                    self._flush()
                except Exception as exc:  # noqa: BLE001
                    warn_once("flusher", f"flushing telemetry failed: {exc!r}")
                with self._cond:
                    self._done = max(self._done, target)
                    self._cond.notify_all()


class ShutdownBudget:
    """``VERL_OTEL_SHUTDOWN_TIMEOUT``, shared by every wait of a process at fit end and exit: a collector that
    never answers costs it once, not once per fit end and again at exit."""

    def __init__(self, total_s: float) -> None:
        self.total_s = total_s
        self._spent_s = 0.0

    def left_s(self) -> float:
        return max(0.0, self.total_s - self._spent_s)

    def spend(self, wait: Callable[[float], bool]) -> bool:
        """``wait(seconds_left)``, its time charged to the budget."""
        t0 = time.monotonic()
        try:
            return wait(self.left_s())
        finally:
            self._spent_s += time.monotonic() - t0
