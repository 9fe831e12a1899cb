"""The note a signalled process leaves in ``$VERL_OTEL_DIR/ends/``: which signal reached which process (pid, host,
process role) and when. Ray ends the trainer with SIGTERM moments after its driver got Ctrl-C; the trainer reads the
driver's note to say "interrupted", and ``doctor`` names the process the signal reached."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from verl_otel import config as cfg
from verl_otel import semconv as sc


class _Spill(Protocol):
    def spill_now(self) -> int: ...


ACK_WAIT_S = 2.0  # a driver waits this long at most for the trainer to write its step after Ctrl-C


def write_note(data_dir: Path, signal: str, process_role: str) -> Path | None:
    """One small file, written at once (the process may be killed a few milliseconds later). Never raises."""
    try:
        folder = data_dir / sc.ENDS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        host, pid = cfg.hostname(), os.getpid()
        note = {"signal": signal, "pid": pid, "host": host, "process_role": process_role, "time": time.time()}
        path = folder / f"{host}-{pid}.json"
        path.write_text(json.dumps(note))
        return path
    except Exception:  # noqa: BLE001 - a note that cannot be written is one reader's hint less
        return None


def _ack(note: Path) -> Path:
    return note.with_suffix(".ack")


def wait_ack(note: Path, wait_s: float) -> bool:
    """The driver, after Ctrl-C or a SIGTERM: Ray ends the trainer once the driver is gone, so it waits (bounded)
    until a trainer on this host read the note and wrote its open step (:class:`NoteWatch`)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if _ack(note).exists():
            return True
        time.sleep(0.02)
    return False


class NoteWatch:
    """A trainer's look at ``ends/`` (on the end watch's thread, every few hundred ms; a stat unless it changed):
    a fresh SIGINT or SIGTERM note of this host's driver tells ``on_interrupt`` (the run's end attributes) once, then
    acks: the driver waits for that before it ends, and with it Ray's cluster and this process."""

    def __init__(
        self, data_dir: Path, process_role: Callable[[], str], on_interrupt: Callable[[dict[str, Any]], object]
    ):
        self._dir, self._process_role, self._on_interrupt = data_dir / sc.ENDS_DIR, process_role, on_interrupt
        self._seen_ns = 0
        self._done: set[str] = set()

    def __call__(self) -> None:
        try:
            mtime = os.stat(self._dir).st_mtime_ns
        except OSError:
            return
        if mtime == self._seen_ns:
            return
        self._seen_ns = mtime
        host, now = cfg.hostname(), time.time()
        for path in sorted(self._dir.glob("*.json")):
            if path.name in self._done:
                continue
            try:
                note = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            fresh = now - float(note.get("time") or 0) < sc.END_NOTE_FRESH_S
            self._done.add(path.name)
            if fresh and note.get("signal") in ("SIGINT", "SIGTERM") and note.get("host") == host:
                self._on_interrupt(_note_attributes(note, f"Ray ending the {self._process_role()}"))
                with contextlib.suppress(OSError):
                    _ack(path).write_text(str(os.getpid()))


def read_notes(data_dir: Path) -> list[dict[str, Any]]:
    """Every note of the folder, oldest first (a damaged one is skipped)."""
    notes = []
    for path in sorted((data_dir / sc.ENDS_DIR).glob("*.json")):
        try:
            note = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(note, dict):
            notes.append(note)
    return sorted(notes, key=lambda n: float(n.get("time") or 0))


def fresh_interrupt(data_dir: Path, within_s: float = sc.END_NOTE_FRESH_S) -> dict[str, Any] | None:
    """The newest SIGINT note of this host written in the last ``within_s`` seconds, if any."""
    host, now = cfg.hostname(), time.time()
    for note in reversed(read_notes(data_dir)):
        if (
            note.get("signal") == "SIGINT"
            and note.get("host") == host
            and now - float(note.get("time") or 0) < within_s
        ):
            return note
    return None


def signal_attributes(data_dir: Path, signum: int, process_role: str, pid: int) -> dict[str, Any]:
    """The run_end attributes of a signal that reached this process: SIGINT is an interrupt; so is a SIGTERM that
    follows a driver's fresh SIGINT note on this host (Ray ends the trainer moments after Ctrl-C reached the driver);
    any other SIGTERM is a termination (a scheduler's time limit)."""
    from verl_otel.process.ends import signal_name

    name = signal_name(signum)
    interrupt = signum == signal.SIGINT
    attrs: dict[str, Any] = {
        sc.ATTR_RUN_END_REASON: sc.END_INTERRUPTED if interrupt else sc.END_TERMINATED,
        sc.ATTR_RUN_END_DETAIL: name,
        sc.ATTR_RUN_END_PROCESS_ROLE: process_role,
        sc.ATTR_RUN_END_PID: pid,
        sc.ATTR_RUN_END_HOST: cfg.hostname(),
    }
    note = None if interrupt else fresh_interrupt(data_dir)
    return attrs if note is None else _note_attributes(note, f"{name} to the {process_role}")


def _note_attributes(note: dict[str, Any], then: str) -> dict[str, Any]:
    """What a driver's note says ended the run: its SIGINT an interrupt, its SIGTERM a termination."""
    interrupt = note.get("signal") == "SIGINT"
    who = note.get("process_role", note.get("role"))  # a note of an older verl-otel: "role"
    return {
        sc.ATTR_RUN_END_REASON: sc.END_INTERRUPTED if interrupt else sc.END_TERMINATED,
        sc.ATTR_RUN_END_DETAIL: f"{note.get('signal')} to the {who}, then {then}",
        sc.ATTR_RUN_END_PROCESS_ROLE: str(who),
        sc.ATTR_RUN_END_PID: int(note.get("pid") or 0),
        sc.ATTR_RUN_END_HOST: str(note.get("host")),
    }


class RunEnds:
    """One process' listeners of the signals that end it (process/ends.py's watch): a trainer ends its open step
    (``watch``), a driver leaves a note (``note``). What a listener ends is written at once, past the batch
    queue, and the OTLP buffers are spilled to unsent/ right after (Ray kills a worker milliseconds after
    SIGTERM; if the process lives on, the sender still sends the spilled spans)."""

    def __init__(self, settings: cfg.Settings, unsent: _Spill, process_role: Callable[[], str]) -> None:
        self._data_dir, self._unsent, self._process_role = settings.data_dir, unsent, process_role
        self._console_only, self._deprecated_names = settings.console_only, settings.deprecated_names

    def watch(self, listener: Callable[[dict[str, Any]], object]) -> bool:
        """``listener(run_end attributes)`` when SIGINT or SIGTERM arrives (main thread only: whether it is on)."""

        def write(attrs: dict[str, Any]) -> None:
            from verl_otel.export.providers import urgent_export

            if self._deprecated_names:  # the key's old name too, for a release (CHANGELOG.md)
                attrs[sc.ATTR_DEPRECATED_RUN_END_ROLE] = attrs.get(sc.ATTR_RUN_END_PROCESS_ROLE)

            with urgent_export():
                listener(attrs)
            self._unsent.spill_now()

        def told(signum: int) -> None:
            write(signal_attributes(self._data_dir, signum, self._process_role(), os.getpid()))

        from verl_otel.process.ends import WATCH

        if not self._console_only:  # Ctrl-C reached the driver: write the step before Ray ends this process
            WATCH.poll(NoteWatch(self._data_dir, self._process_role, write))
        return self._listen(told)

    def note(self, process_role: str) -> bool:
        """A driver: a signal that reaches it leaves a note (:func:`write_note`)."""
        from verl_otel.process.ends import signal_name

        def told(signum: int) -> None:
            if self._console_only:
                return
            note = write_note(self._data_dir, signal_name(signum), process_role)
            if note is not None:  # the exit waits for this (process/ends.py: settle)
                wait_ack(note, ACK_WAIT_S)

        from verl_otel.process.ends import WATCH

        # the exit's wait for the ack runs before Ray's shutdown (exit hooks run last registered first; Ray's is
        # registered when ray is imported, which may come after the watch was installed)
        atexit.unregister(WATCH.settle)
        atexit.register(WATCH.settle)

        return self._listen(told)

    def _listen(self, told: Callable[[int], None]) -> bool:
        from verl_otel.process.ends import WATCH

        return WATCH.listen(told)
