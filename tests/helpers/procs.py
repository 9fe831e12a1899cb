"""Running Python in a fresh process with a clean telemetry environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
TESTS = ROOT / "tests"  # the drive_*.py scripts the tests run in their own process


def clean_env(**extra: str) -> dict[str, str]:
    """The test process' environment without any telemetry settings, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VERL_OTEL_", "OTEL_", "VERL_PROGRESS_", "VERL_ROLLOUT_PROGRESS_"))
    }
    env.update(extra)
    return env


def run_py(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
