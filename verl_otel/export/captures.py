"""Captures (docs/guides/hangs.md): while a call is stalled, a sampling profile of the process that runs it, a
speedscope file a browser opens (``verl-otel capture FILE`` prints its hottest frames) under
``$VERL_OTEL_DIR/captures/``, named as the stall's evidence file.

``py-spy record`` samples the process from outside (``--nonblocking``: the process is never paused; ``--idle``: a
thread waiting counts, since a hang waits); where py-spy is missing or may not attach, the process samples its own
Python stacks on a thread of its own. Each capture runs on a thread of its own, so the stall watch never waits for
it. Bounded: captures per process, per phase, a cool-down between two, the bytes of a file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verl_otel import semconv as sc
from verl_otel._log import warn_once
from verl_otel.config import CaptureSettings, Settings
from verl_otel.export.stall_evidence import find_py_spy

_LAUNCH_S = 15.0  # py-spy's own start and write, past the capture's seconds


class Captures:
    """Starts the captures of one process; thread-safe."""

    def __init__(
        self,
        settings: CaptureSettings,
        folder: Path,
        py_spy: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings, self.folder = settings, folder
        self._py_spy = find_py_spy() if py_spy is None else py_spy
        self._clock = clock
        self._lock = threading.Lock()
        self._count = 0
        self._per_phase: dict[str, int] = {}
        self._last = float("-inf")
        self.threads: list[threading.Thread] = []  # the captures running or done (a test joins them)

    def start(self, name: str, phase: str, pid: int, thread: int | None = None) -> tuple[str, str] | None:
        """A capture of ``pid`` (this process) starts now, on a thread of its own: (its file, the tool), or None
        where a bound says no. ``thread``: the stalled thread (``threading.get_ident()``), the profile a browser
        and ``verl-otel capture`` open on."""
        s = self.settings
        with self._lock:
            now = self._clock()
            if (
                not s.enabled
                or self._count >= s.max_per_process
                or self._per_phase.get(phase, 0) >= s.max_per_phase
                or now - self._last < s.cooldown_s
            ):
                return None
            self._count += 1
            self._per_phase[phase] = self._per_phase.get(phase, 0) + 1
            self._last = now
        path = self.folder / f"{name}{sc.CAPTURE_SUFFIX}"
        tool = sc.CAPTURE_TOOL_PY_SPY if self._py_spy else sc.CAPTURE_TOOL_IN_PROCESS
        native = _native_id(thread)
        t = threading.Thread(target=self._run, args=(path, pid, tool, native), name="verl-otel-capture", daemon=True)
        self.threads.append(t)
        t.start()
        return str(path), tool

    def _run(self, path: Path, pid: int, tool: str, thread: int | None) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if tool == sc.CAPTURE_TOOL_PY_SPY and self._record(path, pid):
                if thread is not None and path.is_file():
                    write_doc(path, focus(json.loads(path.read_bytes()), thread), self.settings.max_bytes)
                return
            if pid == os.getpid():  # py-spy missing or refused: the process' own Python stacks
                s = self.settings
                doc = sample_own_stacks(s.seconds, s.rate_hz, max_frames=s.max_bytes // 4)
                write_doc(path, focus(doc, thread), s.max_bytes)
        except Exception as exc:  # noqa: BLE001 - a capture never ends the process
            warn_once("capture", f"a capture failed ({exc!r}); the stall's evidence file still has the stacks")

    def _record(self, path: Path, pid: int) -> bool:
        s = self.settings
        cmd = [
            self._py_spy,
            "record",
            *("--pid", str(pid), "--duration", str(max(1, round(s.seconds))), "--rate", str(s.rate_hz)),
            *("--format", "speedscope", "--output", str(path), "--nonblocking", "--idle"),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=s.seconds + _LAUNCH_S, text=True, errors="replace")
        except (OSError, subprocess.TimeoutExpired) as exc:
            warn_once("capture-py-spy", f"py-spy record did not run ({exc!r}): captures sample their own stacks")
            return False
        if done.returncode != 0 or not path.is_file():
            why = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            warn_once("capture-py-spy", f"py-spy record failed ({why[0][:200]}): captures sample their own stacks")
            return False
        if path.stat().st_size > s.max_bytes:
            path.unlink(missing_ok=True)
            warn_once("capture-size", f"a capture passed {s.max_bytes >> 20} MiB and was dropped: {path.name}")
        return True


def for_settings(settings: Settings) -> Captures | None:
    """A process' captures (None in console-only mode or with ``VERL_OTEL_CAPTURE=0``)."""
    if settings.console_only or not settings.capture.enabled:
        return None
    return Captures(settings.capture, settings.data_dir / sc.CAPTURES_DIR)


def _native_id(ident: int | None) -> int | None:
    """The kernel's id of a thread (py-spy names its profiles by it) from Python's."""
    return next((t.native_id for t in threading.enumerate() if t.ident == ident), None)


def focus(doc: dict[str, Any], thread: int | None) -> dict[str, Any]:
    """``doc`` opening on ``thread``'s profile (speedscope's ``activeProfileIndex``), marked as set by us."""
    names = [str(p.get("name", "")) for p in doc.get("profiles") or [] if isinstance(p, dict)]
    index = next((i for i, n in enumerate(names) if n.startswith(f"Thread {thread} ")), None)
    if thread is not None and index is not None:
        doc["activeProfileIndex"], doc[sc.CAPTURE_FOCUS_KEY] = index, True
    return doc


def sample_own_stacks(seconds: float, rate_hz: int, max_frames: int = 4 * 2**20) -> dict[str, Any]:
    """This process' Python stacks sampled for ``seconds`` (every thread but the sampler), as a speedscope
    document like py-spy's: one sampled profile per thread, named ``Thread <native id> "<name>"``. Sampling stops
    early once ``max_frames`` frame references are held (a file of that many would pass the capture's byte cap
    anyway), so a long capture of a process with many threads stays bounded in memory."""
    me = threading.get_ident()
    frames: dict[tuple[str, str, int], int] = {}
    samples: dict[int, list[list[int]]] = {}
    end, step = time.monotonic() + seconds, 1.0 / max(1, rate_hz)
    held = 0
    while time.monotonic() < end and held < max_frames:
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            stack: list[int] = []
            f: Any = frame
            while f is not None and len(stack) < 256:
                code = f.f_code
                stack.append(frames.setdefault((code.co_name, code.co_filename, f.f_lineno), len(frames)))
                f = f.f_back
            samples.setdefault(ident, []).append(stack[::-1])  # outermost first, as speedscope reads it
            held += len(stack)
        time.sleep(step)
    shared = [
        {"name": n, "file": file, "line": line} for (n, file, line), _ in sorted(frames.items(), key=lambda x: x[1])
    ]
    threads = {t.ident: (t.native_id, t.name) for t in threading.enumerate()}
    profiles = [
        {
            "type": "sampled",
            "name": 'Thread {} "{}"'.format(*threads.get(ident, (ident, ""))),
            "unit": "none",
            "startValue": 0,
            "endValue": len(stacks),
            "samples": stacks,
            "weights": [1] * len(stacks),
        }
        for ident, stacks in samples.items()
    ]
    return {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": shared},
        "profiles": profiles,
        "name": f"verl-otel capture of pid {os.getpid()}",
        "exporter": "verl-otel",
    }


def write_doc(path: Path, doc: dict[str, Any], max_bytes: int) -> None:
    data = json.dumps(doc, separators=(",", ":")).encode()
    if len(data) > max_bytes:
        warn_once("capture-size", f"a capture passed {max_bytes >> 20} MiB and was dropped: {path.name}")
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


__all__ = ["Captures", "focus", "for_settings", "sample_own_stacks", "write_doc"]
