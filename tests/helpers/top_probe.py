"""Watches a real demo run with `verl-otel top` while it runs: `top --once` frames every few seconds (the
CLI in its own process, as a user runs it; each frame also saved under the run's top-frames/), and the live
view in a tmux terminal captured at the same moments. ``TopWatch`` is the live view's loop in this process
(the frames it would show, with the replica watch kept across them), for a run too short for a terminal's."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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


class TopWatch:
    """What the live `verl-otel top` shows of a run, a frame per call: the run's targets file read, the view
    built, the replicas watched across frames (``stuck_after_s``: the alert window the test gives its rules)."""

    def __init__(self, out: Path, stuck_after_s: float) -> None:
        from verl_otel.live.replicas import ReplicaWatch
        from verl_otel.live.run_view import History
        from verl_otel.live.sources import TargetsFile

        self.out = out
        self.source = TargetsFile(out)
        self.history = History()
        self.watch = ReplicaWatch(stuck_after_s)
        self.frames: list[tuple[float, str, list[Any]]] = []  # (time, text, replicas)
        self.last = 0.0

    def frame(self) -> None:
        from rich.console import Console

        from verl_otel.live.health_table import signals
        from verl_otel.live.run_view import build_view
        from verl_otel.live.sources import SourceError
        from verl_otel.live.view import frame

        if (
            not (self.out / sc.PROM_TARGETS_FILE).exists() or time.time() - self.last < 1.0
        ):  # the live view's --interval 1
            return
        self.last = time.time()
        try:
            view = build_view(self.source.read())
        except SourceError:  # the file is being rewritten
            return
        now = time.time()
        self.history.add(view)
        view.replicas = self.watch.update(view.replicas, now)
        console = Console(width=WIDTH, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
        console.print(frame(view, self.history, signals(view, self.history), now=now))
        self.frames.append((now, console.export_text(), list(view.replicas)))
        saved = self.out / "top-watch"  # for a failing test's reader
        saved.mkdir(exist_ok=True)
        (saved / f"{len(self.frames):03d}-{now:.1f}.txt").write_text(self.frames[-1][1])
