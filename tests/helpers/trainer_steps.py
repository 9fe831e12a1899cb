"""A trainer process' step tracer in a fresh runtime writing to ``tmp_path``, driven by a test as the hooks drive
it (phase_enter/phase_exit, metrics_logged): fit() starts on entry, ends and flushes on a clean exit."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from verl_otel import runtime, trackers
from verl_otel import semconv as sc
from verl_otel.telemetry.steps import RunInfo


@contextlib.contextmanager
def trainer_steps(tmp_path: Path, monkeypatch: Any, total_steps: int) -> Iterator[tuple[Any, list[int]]]:
    """Yields the trainer's trackers and the global step cell the tracer reads (``number[0] = step``)."""
    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    runtime.reset_for_tests()
    try:
        m = trackers.current()
        m.wire(sc.PROCESS_ROLE_TRAINER)
        number = [0]
        m.steps.fit_started(RunInfo("v1", "proj", "exp", 2, 4, total_steps), lambda: number[0])
        yield m, number
        m.steps.fit_ended(None)
        runtime.current().flush_wait()
    finally:
        runtime.reset_for_tests()
