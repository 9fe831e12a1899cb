"""Watches a real demo run with `verl-otel top` while it runs: `top --once` frames every few seconds (the
CLI in its own process, as a user runs it; each frame also saved under the run's top-frames/), and the live
view in a tmux terminal captured at the same moments."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from verl_otel import semconv as sc

WIDTH = 160


class TopProbe:
    def __init__(self, every_s: float = 4.0, limit: int = 60) -> None:
        self.every_s = every_s
        self.limit = limit
        self.frames: list[tuple[int, str]] = []  # (exit code, stdout) of `top --once`
        self.screens: list[str] = []  # tmux captures of the live view
        self.session: str | None = None
        self.rc_file: Path | None = None
        self._last = 0.0

    def __call__(self, out: Path) -> None:
        if time.time() - self._last < self.every_s or not (out / sc.PROM_TARGETS_FILE).exists():
            return
        if len(self.frames) >= self.limit:
            return
        self._last = time.time()
        proc = subprocess.run(
            [sys.executable, "-m", "verl_otel.cli.main", "top", "--once", "--targets", str(out), "--width", str(WIDTH)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.frames.append((proc.returncode, proc.stdout + proc.stderr))
        saved = out / "top-frames"
        saved.mkdir(exist_ok=True)
        (saved / f"{len(self.frames):03d}.txt").write_text(proc.stdout + proc.stderr)
        if self.session is None and shutil.which("tmux"):
            self._start_live(out)
        elif self.session is not None:
            self.screens.append(self._tmux("capture-pane", "-p", "-t", self.session))

    def _start_live(self, out: Path) -> None:
        self.session = f"verl-otel-top-probe-{out.name}"
        self.rc_file = out / "top-live.rc"
        top = f"{sys.executable} -m verl_otel.cli.main top --targets {out} --interval 1"
        cmd = f"{top}; echo $? > {self.rc_file}; sleep 60"
        self._tmux("new-session", "-d", "-s", self.session, "-x", str(WIDTH), "-y", "70", cmd)

    def stop(self) -> int | None:
        """Ctrl-C the live view; its exit code (None without tmux)."""
        if self.session is None:
            return None
        self.screens.append(self._tmux("capture-pane", "-p", "-t", self.session))
        self._tmux("send-keys", "-t", self.session, "C-c")
        deadline = time.time() + 15
        while time.time() < deadline and not (self.rc_file and self.rc_file.exists()):
            time.sleep(0.2)
        self.after_stop = self._tmux("capture-pane", "-p", "-t", self.session, "-S", "-300")
        self._tmux("kill-session", "-t", self.session)
        return int(self.rc_file.read_text()) if self.rc_file and self.rc_file.exists() else None

    @staticmethod
    def _tmux(*args: str) -> str:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=10).stdout
