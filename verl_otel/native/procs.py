"""Starting, probing and stopping the stack's processes. Each runs in its own session (it outlives
``verl-otel stack up``), logs to STATE/logs/NAME.log and is remembered in STATE/pids/NAME.pid with its
binary, so ``stack down`` never signals a pid that has since been reused by something else."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

#: the children this process started: waited for on stop, so none is left a zombie
_children: dict[int, subprocess.Popen[bytes]] = {}


def spawn(name: str, argv: list[str], state: Path, env: dict[str, str] | None = None) -> int:
    (state / "logs").mkdir(parents=True, exist_ok=True)
    (state / "pids").mkdir(parents=True, exist_ok=True)
    with open(state / "logs" / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=state,
            start_new_session=True,
            env={**os.environ, **env} if env else None,
        )
    _children[proc.pid] = proc
    (state / "pids" / f"{name}.pid").write_text(f"{proc.pid}\n{argv[0]}\n")
    return proc.pid


def log_tail(state: Path, name: str, n: int = 1500) -> str:
    path = state / "logs" / f"{name}.log"
    return path.read_text(errors="replace")[-n:] if path.is_file() else "(no log)"


def alive(pid: int) -> bool:
    proc = _children.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc (not Linux)
        except OSError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(200 <= r.status < 300)
    except OSError:
        return False


def wait_healthy(pid: int, url: str, timeout_s: float) -> bool:
    """Poll ``url`` until it answers 2xx; False when the process exits or the time is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return False
        if healthy(url):
            return True
        time.sleep(0.25)
    return False


def running(state: Path) -> dict[str, int]:
    """name -> pid of the recorded processes still running their recorded binary."""
    out = {}
    for pidfile in sorted((state / "pids").glob("*.pid")) if (state / "pids").is_dir() else []:
        try:
            pid_text, exe = pidfile.read_text().split("\n")[:2]
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if alive(pid) and _runs(pid, exe):
            out[pidfile.stem] = pid
    return out


def _runs(pid: int, exe: str) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return pid in _children  # no /proc: trust only our own children
    return cmd == exe


def stop(state: Path, name: str, pid: int, timeout_s: float = 20.0, crash: bool = False) -> None:
    """SIGTERM (each part flushes and closes its storage), SIGKILL after ``timeout_s``; ``crash``: SIGKILL at
    once, as the OOM killer or a lost node ends it (tests: what survives a crash)."""
    for sig in (signal.SIGKILL,) if crash else (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and alive(pid):
            time.sleep(0.1)
        if not alive(pid):
            break
    proc = _children.pop(pid, None)
    if proc is not None:
        proc.wait()
    (state / "pids" / f"{name}.pid").unlink(missing_ok=True)
