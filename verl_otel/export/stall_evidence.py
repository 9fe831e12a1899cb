"""Stall evidence files: ``$VERL_OTEL_DIR/stalls/<name>.txt``, one per stalled phase and process, written on
the stall watchdog's thread (never a training thread), with the trace file's care: no symlink followed, no
FIFO or device written, a size cap per file. Also the native stacks, by ``py-spy dump --native`` when it is
installed and may attach (a subprocess with a deadline; otherwise one line says why not)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from verl_otel import semconv as sc
from verl_otel._log import warn_once
from verl_otel.config import Settings
from verl_otel.export.otlp_json import open_regular, write_all

MAX_FILE_BYTES = 1 << 20
PY_SPY_TIMEOUT_S = 20.0


class EvidenceFiles:
    """Writes and appends stall files under ``root``; every failure is one log line and a None, never raised."""

    def __init__(self, root: Path, max_bytes: int = MAX_FILE_BYTES, py_spy: str | None = None) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._py_spy = py_spy if py_spy is not None else find_py_spy()

    def path(self, name: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:200]
        return self.root / (safe + sc.STALL_FILE_SUFFIX)

    def write(self, name: str, text: str) -> Path | None:
        """Create (or replace) the file ``name`` with ``text`` (cut at the cap); its path, or None."""
        path = self.path(name)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, _cut(text.encode(errors="replace"), self.max_bytes))
            finally:
                os.close(fd)
            return path
        except OSError as exc:
            warn_once(f"stall-file:{self.root}", f"cannot write stall evidence under {self.root} ({exc}); no files")
            return None

    def append(self, path: Path, text: str) -> bool:
        """Add ``text`` to a file made by :meth:`write`, within the cap; False when it is full or unwritable."""
        try:
            fd = open_regular(path, os.O_WRONLY | os.O_APPEND)
            try:
                room = self.max_bytes - os.fstat(fd).st_size
                if room <= 0:
                    return False
                write_all(fd, _cut(text.encode(errors="replace"), room))
            finally:
                os.close(fd)
            return True
        except OSError as exc:
            warn_once(f"stall-append:{path}", f"cannot add to stall evidence {path} ({exc})")
            return False

    def native(self, pid: int, timeout_s: float = PY_SPY_TIMEOUT_S) -> str:
        """``py-spy dump --native`` of ``pid`` (this process), or a line saying why there is none."""
        if not self._py_spy:
            return "(native stacks: py-spy is not installed; pip install py-spy)\n"
        cmd = [self._py_spy, "dump", "--native", "--pid", str(pid)]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=timeout_s, text=True, errors="replace")
        except subprocess.TimeoutExpired:
            return f"(native stacks: py-spy did not answer in {timeout_s:g}s)\n"
        except OSError as exc:
            return f"(native stacks: cannot run py-spy: {exc})\n"
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return f"(native stacks: py-spy could not attach: {why[0][:300]}; ptrace may be restricted)\n"
        return done.stdout


def for_settings(settings: Settings) -> EvidenceFiles | None:
    """A process' evidence writer (None in console-only mode: no files at all)."""
    return None if settings.console_only else EvidenceFiles(settings.data_dir / sc.STALLS_DIR)


def find_py_spy() -> str:
    """py-spy on PATH, or beside this Python (a venv's bin/, which a Ray worker's PATH may lack)."""
    beside = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or (str(beside) if os.access(beside, os.X_OK) else "")


def _cut(data: bytes, limit: int) -> bytes:
    if len(data) <= limit:
        return data
    mark = b"\n... (cut at the size cap)\n"
    return data[: max(0, limit - len(mark))] + mark
