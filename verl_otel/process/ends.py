"""The moment a signal ends the process: SIGINT and SIGTERM told to listeners on a thread of our own, at once.

Why not a Python signal handler: Python runs handlers on the main thread between bytecodes, and a trainer's main
thread sits in ``ray.get`` for seconds at a time; Ray ends its workers with SIGTERM and SIGKILL milliseconds later.
So nothing of a handler is ours: the process keeps its handlers (Ray's SIGTERM handler, Python's
KeyboardInterrupt) and its exit behaviour. Python's C-level handler writes each signal's number to the *wakeup
fd* (``signal.set_wakeup_fd``) the moment it arrives, whatever the main thread does; ours is a pipe whose reader
thread tells the listeners and passes every byte on to the wakeup fd that was there before (asyncio's), so both
see every signal. It is one per process (the wakeup fd is), installed from the main thread only, and
:func:`uninstall` puts the old fd back.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable

from verl_otel._log import logger

Listener = Callable[[int], None]
SETTLE_S = 2.5  # a driver's wait for the trainer's ack (export/run_end.py: ACK_WAIT_S) and a margin
POLL_S = 0.2
WAKE = b"\0"  # what poll() writes to wake the reader (no signal has the number 0)
#: the signals that end a run (a terminal's Ctrl-C, a scheduler's or Ray's SIGTERM)
ENDING = frozenset((int(signal.SIGINT), int(signal.SIGTERM)))


class EndWatch:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._pipe: tuple[int, int] | None = None
        self._old_fd = -1
        self._pid = os.getpid()
        self.told: list[int] = []  # the ending signals told so far (once each)
        self._checks: list[Callable[[], None]] = []  # run on the watch's thread every POLL_S (poll)
        self._telling = threading.Event()  # set while listeners run: the exit waits for them (settle)
        self._poller_pid = -1  # the process whose poll-only thread runs (poll, off the main thread)

    def listen(self, listener: Listener) -> bool:
        """Tell ``listener(signum)`` when an ending signal arrives; installs the watch (main thread only).
        Returns whether the watch is on. Never raises."""
        with self._lock:
            if listener not in self._listeners:
                self._listeners.append(listener)
        return self.install()

    def forget(self, listener: Listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    @property
    def installed(self) -> bool:
        return self._pipe is not None and self._pid == os.getpid()

    def install(self) -> bool:
        if self.installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            logger.debug("the end watch is not installed: not on the main thread (pid %s)", os.getpid())
            return False
        try:
            r, w = os.pipe()
            os.set_blocking(w, False)
            old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (OSError, ValueError) as exc:  # no fds left, or an interpreter without signals here
            logger.debug("the end watch is not installed (%r)", exc)
            return False
        self._pipe, self._old_fd, self._pid, self.told = (r, w), old, os.getpid(), []
        atexit.register(self.settle)
        threading.Thread(target=self._read, args=(r,), name="verl-otel-end-watch", daemon=True).start()
        return True

    def uninstall(self) -> None:
        """uninstrument(): no more listeners, and the wakeup fd that was there before is back (main thread only;
        elsewhere the pipe stays, telling nobody)."""
        with self._lock:
            self._listeners.clear()
            self._checks.clear()
        pipe = self._pipe
        if pipe is None or self._pid != os.getpid() or threading.current_thread() is not threading.main_thread():
            return
        with contextlib.suppress(OSError, ValueError):
            current = signal.set_wakeup_fd(self._old_fd)
            if current != pipe[1]:  # someone set their own since: theirs stays
                signal.set_wakeup_fd(current)
                return
        self._pipe = None
        with contextlib.suppress(OSError):
            os.close(pipe[1])  # the reader sees the end of the pipe and stops

    def poll(self, check: Callable[[], None]) -> None:
        """Run ``check`` on the watch's thread about every POLL_S (a trainer looks for its driver's note: Ctrl-C
        reached the driver, and Ray will end this process moments later). Off the main thread (an async Ray
        actor's methods, fully_async's trainer) the watch cannot be installed: a thread of its own polls then."""
        with self._lock:
            if check not in self._checks:
                self._checks.append(check)
            start_poller = not self.installed and self._poller_pid != os.getpid()
            if start_poller:
                self._poller_pid = os.getpid()
        pipe = self._pipe
        if pipe is not None and self._pid == os.getpid():  # the reader may wait in read(): wake it to poll
            with contextlib.suppress(OSError):
                os.write(pipe[1], WAKE)
        elif start_poller:
            threading.Thread(target=self._poll_only, name="verl-otel-end-poll", daemon=True).start()

    def _poll_only(self) -> None:
        """The checks without the signal watch, until the watch is installed (its reader polls then) or none
        is left."""
        while not self.installed:
            with self._lock:
                checks = list(self._checks)
            if not checks:
                break
            self._check(checks)
            time.sleep(POLL_S)
        with self._lock:
            self._poller_pid = -1

    def _read(self, fd: int) -> None:
        while True:
            with self._lock:
                checks = list(self._checks)
            if checks:
                with contextlib.suppress(OSError, ValueError):
                    if not select.select([fd], [], [], POLL_S)[0]:
                        self._check(checks)
                        continue
            try:
                data = os.read(fd, 64)
            except InterruptedError:
                continue
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    os.close(fd)
                return
            data = data.replace(WAKE, b"")  # ours (poll), not a signal: not passed on
            if not data:
                continue
            if any(signum in ENDING and signum not in self.told for signum in data):
                self._telling.set()  # before anything else: the exit waits for what follows (settle)
            if self._old_fd >= 0:  # the one before us (asyncio's loop) gets every byte as if we were not here
                with contextlib.suppress(OSError):
                    os.write(self._old_fd, data)
            for signum in data:
                if signum in ENDING and signum not in self.told:
                    self.told.append(signum)
                    self._tell(signum)

    def _check(self, checks: list[Callable[[], None]]) -> None:
        self._telling.set()
        try:
            for check in checks:
                try:
                    check()
                except Exception as exc:  # noqa: BLE001
                    logger.debug("end check %r failed: %r", check, exc)
        finally:
            self._telling.clear()

    def _tell(self, signum: int) -> None:
        try:
            with self._lock:
                listeners = list(self._listeners)
            for listener in listeners:
                try:
                    listener(signum)
                except Exception as exc:  # noqa: BLE001 - a listener's error never stops the others
                    logger.debug("end listener %r failed: %r", listener, exc)
        finally:
            self._telling.clear()

    def settle(self, timeout_s: float = SETTLE_S) -> None:
        """At exit: a signal's handler (Ray's, which raises SystemExit) may end the process while the listeners
        still write; the interpreter waits for them this long at most (a daemon thread is cut off at exit)."""
        pipe = self._pipe
        if pipe is None or self._pid != os.getpid():
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:  # a signal not read yet: the reader thread wakes now
                pending = bool(select.select([pipe[0]], [], [], 0)[0])
            except (OSError, ValueError):
                pending = False
            if not pending and not self._telling.is_set():
                return
            time.sleep(0.005)


#: the process' one watch (the wakeup fd is one per process, like the hook registry's classes)
WATCH = EndWatch()


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
