import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


def clean_env(**extra: str) -> dict[str, str]:
    """The test process' environment without any telemetry settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VERL_OTEL_", "OTEL_", "VERL_PROGRESS_", "VERL_ROLLOUT_PROGRESS_"))}
    env.update(extra)
    return env


def run_py(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def drive(tmp_path: Path):
    def _run(steps: int = 2, fail_phase: str | None = None, **env: str) -> subprocess.CompletedProcess:
        args = [str(Path(__file__).parent / "drive_hooks.py"), str(steps)] + ([fail_phase] if fail_phase else [])
        return run_py(args, clean_env(**env), tmp_path)
    return _run
