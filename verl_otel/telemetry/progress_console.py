"""The seed's console progress lines, as an observer (off unless VERL_PROGRESS_LOG=1):

    [VERL_PROGRESS][step=8] update_actor start
    [VERL_PROGRESS][step=8] rollout running: elapsed=25.0s
    [VERL_PROGRESS][step=8] update_actor done: 101.23s
    [VERL_PROGRESS][step=8][rollout_worker=0][train] [############--------] 48/64 (75.0%) elapsed=19.1s eta=6.4s
    [VERL_PROGRESS][actor=actor][phase=update_policy] [##########------------] 6/12 (epoch 2/3, mini 2/4) ...
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, TextIO

from verl_otel.config import ProgressSettings
from verl_otel.telemetry.eta import bar, fmt_s, rate_eta
from verl_otel.telemetry.steps import RunInfo, StepResult

PREFIX = "[VERL_PROGRESS]"


def rollout_line(step: int, worker: int | None, mode: str, done: int, total: int, elapsed: float,
                 width: int) -> str:
    who = "[rollout_manager]" if worker is None else f"[rollout_worker={worker}]"
    pct = 100.0 * done / total if total > 0 else 0.0
    return (f"{PREFIX}[step={step}]{who}[{mode}] {bar(done, total, width)} {done}/{total} ({pct:.1f}%) "
            f"elapsed={fmt_s(elapsed)} eta={fmt_s(rate_eta(elapsed, done, total))}")


def update_line(role: str, done: int, total: int, epoch: int, epochs: int, mini: int, minis: int,
                elapsed: float, width: int = 22) -> str:
    return (f"{PREFIX}[actor={role}][phase=update_policy] {bar(done, total, width)} {done}/{total} "
            f"(epoch {epoch}/{epochs}, mini {mini}/{minis}) elapsed={fmt_s(elapsed)} "
            f"eta={fmt_s(rate_eta(elapsed, done, total))}")


class ProgressConsole:
    """Phase start/done lines and a heartbeat for running phases, in the fit() process."""

    def __init__(self, settings: ProgressSettings, stream: TextIO | None = None) -> None:
        self._s = settings
        self._stream = stream
        self._lock = threading.Lock()
        self._running: dict[str, tuple[int, float]] = {}  # phase -> (step, start)
        self._wake = threading.Event()
        threading.Thread(target=self._heartbeat, name="verl-otel-heartbeat", daemon=True).start()

    def _print(self, line: str) -> None:
        print(line, file=self._stream or sys.stdout, flush=True)

    def _heartbeat(self) -> None:
        while not self._wake.wait(self._s.heartbeat_s):
            now = time.monotonic()
            with self._lock:
                running = list(self._running.items())
            for phase, (step, start) in running:
                if self._s.step_selected(step):
                    self._print(f"{PREFIX}[step={step}] {phase} running: elapsed={now - start:.1f}s")

    def on_fit_start(self, run: RunInfo) -> None:
        pass

    def on_phase_start(self, phase: str, global_step: int) -> None:
        with self._lock:
            self._running[phase] = (global_step, time.monotonic())
        if self._s.step_selected(global_step):
            self._print(f"{PREFIX}[step={global_step}] {phase} start")

    def on_phase_end(self, phase: str, global_step: int, seconds: float, trace_id: str) -> None:
        with self._lock:
            self._running.pop(phase, None)
        if self._s.step_selected(global_step):
            self._print(f"{PREFIX}[step={global_step}] {phase} done: {seconds:.2f}s")

    def on_step_end(self, result: StepResult) -> None:
        pass

    def on_metrics(self, data: Mapping[str, Any], global_step: int) -> None:
        pass
