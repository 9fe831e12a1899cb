"""The [VERL_PROGRESS] console progress lines (VERL_PROGRESS_LOG=1), as an observer of the step tracer and as line
formats the worker-side hooks print with:

    [VERL_PROGRESS][step=8] rollout start: prompts_shape=(128, 1024), rollout_n=4, meta_keys=['global_steps']
    [VERL_PROGRESS][step=8] rollout gen running: elapsed=25.0s
    [VERL_PROGRESS][step=8] reward done: reward_time=0.01s, reward_extra_keys=['reward']
    [VERL_PROGRESS][step=8] update_actor done: 101.23s
    [VERL_PROGRESS][step=8][rollout_manager][train] [########------------] 128/512 (25.0%) elapsed=22.4s eta=67.2s
    [VERL_PROGRESS][step=8][rollout_worker=0][train] [############--------] 48/64 (75.0%) elapsed=19.1s eta=6.4s
    [VERL_PROGRESS][actor=dp][phase=update_policy] [##########------------] 6/12 (epoch 2/3, mini 2/4) ...
    [VERL_PROGRESS][step=8][actor=dp][rank=0] update_actor start

The same lines whether telemetry is on or not: the step tracer feeds this observer in both modes. The other
observers of this package (bars.py, total.py) print with these formats; hooks/ prints nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TextIO

from verl_otel import semconv as sc
from verl_otel.config import ProgressSettings
from verl_otel.telemetry.eta import bar, fmt_s, rate_eta
from verl_otel.telemetry.step_events import StepObserver

PREFIX = "[VERL_PROGRESS]"
#: the [VERL_PROGRESS] heartbeat names the rollout wait "rollout gen" (verl's timer is "gen")
HEARTBEAT_LABEL: dict[str, str] = {sc.PHASE_ROLLOUT: "rollout gen"}
#: verl's engine strategies, as the [VERL_PROGRESS] bar labels them
STRATEGY_LABEL: dict[str, str] = {"fsdp": "dp", "fsdp2": "dp", "megatron": "megatron"}


def step_tag(step: int, version: int | None = None) -> str:
    """``[step=N]``; fully_async's rollouter has no step of its own (its counter is not the trainer's): its
    lines say the parameter version instead."""
    if version is not None:
        return f"{PREFIX}[param_version={version}]"
    return f"{PREFIX}[step={step}]"


def rollout_line(
    step: int,
    worker: int | None,
    mode: str,
    done: int,
    total: int,
    elapsed: float,
    width: int,
    version: int | None = None,
) -> str:
    who = "[rollout_manager]" if worker is None else f"[rollout_worker={worker}]"
    pct = 100.0 * done / total if total > 0 else 0.0
    return (
        f"{step_tag(step, version)}{who}[{mode}] {bar(done, total, width)} {done}/{total} ({pct:.1f}%) "
        f"elapsed={fmt_s(elapsed)} eta={fmt_s(rate_eta(elapsed, done, total))}"
    )


def strategy_label(strategy: Any) -> str:
    text = str(strategy or "").strip().lower()
    return STRATEGY_LABEL.get(text, text or "dp")


def update_line(
    role: str,
    strategy: str,
    done: int,
    total: int,
    elapsed: float,
    epoch: int | None = None,
    epochs: int | None = None,
    mini: int | None = None,
    minis: int | None = None,
    width: int = 22,
) -> str:
    """The actor/critic bar; ``(epoch e/E, mini m/M)`` when the split is known (the [VERL_PROGRESS] dp actor),
    without it as the [VERL_PROGRESS] megatron actor prints."""
    split = f" (epoch {epoch}/{epochs}, mini {mini}/{minis})" if epoch and epochs and mini and minis else ""
    return (
        f"{PREFIX}[{role}={strategy}][phase=update_policy] {bar(done, total, width)} {done}/{total}{split} "
        f"elapsed={fmt_s(elapsed)} eta={fmt_s(rate_eta(elapsed, done, total))}"
    )


def worker_line(
    step: int | None, role: str, strategy: str, rank: int, method: str, seconds: float | None = None
) -> str:
    """A training worker's (rank 0's) start/done line of one call; no step tag when its batch does not say it."""
    what = f"{method} start" if seconds is None else f"{method} done: {seconds:.2f}s"
    tag = PREFIX if step is None else step_tag(step)
    return f"{tag}[{role}={strategy}][rank={rank}] {what}"


def key_preview(keys: Iterable[Any], limit: int) -> str:
    """``['a', 'b', ...]``: the first ``limit`` keys (VERL_PROGRESS_LOG_META_PREVIEW), ``...`` for the rest."""
    names = [str(k) for k in keys if str(k) != sc.TRACEPARENT_KEY]  # ours, not the user's
    shown = ", ".join(repr(n) for n in names[:limit])
    more = ", ..." if len(names) > limit else ""
    return f"[{shown}{more}]" if shown else ("[...]" if more else "[]")


def rollout_details(shape: tuple[int, ...], rollout_n: int | None, meta_keys: Iterable[Any], preview: int) -> str:
    return f"prompts_shape={tuple(shape)}, rollout_n={rollout_n}, meta_keys={key_preview(meta_keys, preview)}"


@dataclass
class _Running:
    step: int
    start: float
    due: float  # monotonic time of its next heartbeat line


class ProgressConsole(StepObserver):
    """Phase start/done lines with the [VERL_PROGRESS] details and one heartbeat per running phase, in the fit()
    process.

    A phase's start line waits for its details when they come from a hook called inside the phase (legacy:
    the rollout manager's call opens after verl's ``gen`` timer): it is printed when they arrive, or plainly
    before any other line."""

    def __init__(self, settings: ProgressSettings, stream: TextIO | None = None) -> None:
        self.settings = self._s = settings
        self._stream = stream
        self._lock = threading.Lock()
        self._running: dict[str, _Running] = {}
        self._held: tuple[str, int] | None = None  # a start line waiting for its details
        self._details: dict[tuple[str, int], str] = {}  # (phase, step) -> what the start/done line adds
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._stopped = False

    # -- details from the hooks ---------------------------------------------------------------------
    def note(self, phase: str, step: int, details: str) -> None:
        """What ``phase`` of ``step`` adds to its start line (rollout) or done line (reward)."""
        with self._lock:
            self._details[(phase, step)] = details
            if len(self._details) > 64:  # details of phases that never ran (a skipped step)
                self._details.pop(next(iter(self._details)))
            held = self._held
            if held != (phase, step):
                return
            self._held = None
            self._details.pop((phase, step), None)
        self._print(f"{step_tag(step)} {phase} start: {details}", flush_held=False)

    # -- observer ----------------------------------------------------------------------------------------
    def on_phase_start(self, phase: str, global_step: int) -> None:
        now = time.monotonic()
        with self._lock:
            if self._stopped:
                return
            self._running[phase] = _Running(global_step, now, now + self._s.heartbeat_s)
            self._ensure_thread_locked()
            self._wake.notify()
        if not self._s.step_selected(global_step):
            return
        with self._lock:
            details = self._details.pop((phase, global_step), None)
            wait = details is None and phase == sc.PHASE_ROLLOUT
        if details is not None:
            self._print(f"{step_tag(global_step)} {phase} start: {details}")
        elif wait:
            self._flush_held()
            with self._lock:
                self._held = (phase, global_step)
        else:
            self._print(f"{step_tag(global_step)} {phase} start")

    def on_phase_end(self, phase: str, global_step: int, seconds: float, trace_id: str) -> None:
        with self._lock:
            self._running.pop(phase, None)
            details = self._details.pop((phase, global_step), None)
        if not self._s.step_selected(global_step):
            return
        if phase == sc.PHASE_REWARD:  # the [VERL_PROGRESS] reward line names its time and the extra keys verl returned
            self._print(
                f"{step_tag(global_step)} reward done: reward_time={seconds:.2f}s, reward_extra_keys={details or '[]'}"
            )
        else:
            self._print(f"{step_tag(global_step)} {phase} done: {seconds:.2f}s")

    # -- output ------------------------------------------------------------------------------------------
    def _flush_held(self) -> None:
        with self._lock:
            held, self._held = self._held, None
        if held is not None:
            self._print(f"{step_tag(held[1])} {held[0]} start", flush_held=False)

    def _print(self, line: str, flush_held: bool = True) -> None:
        if flush_held:
            self._flush_held()
        print(line, file=self._stream or sys.stdout, flush=True)

    # -- heartbeat: one thread, one timer per running phase ---------------------------------------------------
    def _ensure_thread_locked(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._heartbeat, name="verl-otel-heartbeat", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """The heartbeat thread ends (a test's reset, a forked child's old trackers)."""
        with self._lock:
            self._stopped = True
            self._running.clear()
            self._wake.notify()

    def _heartbeat(self) -> None:
        while not self._stopped:
            with self._lock:
                now = time.monotonic()
                due = [(p, r) for p, r in self._running.items() if r.due <= now]
                for _, run in due:
                    run.due += self._s.heartbeat_s
                if self._stopped:
                    return
                if not due:
                    nxt = min((r.due for r in self._running.values()), default=now + 3600.0)
                    self._wake.wait(max(0.01, nxt - now))
                    continue
            for phase, run in due:
                if self._s.step_selected(run.step):
                    label = HEARTBEAT_LABEL.get(phase, phase)
                    self._print(f"{step_tag(run.step)} {label} running: elapsed={now - run.start:.1f}s")
