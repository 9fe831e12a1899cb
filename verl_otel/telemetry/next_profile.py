"""VERL_OTEL_CAPTURE_NEXT=1 (docs/guides/hangs.md): a stall of a phase in step K arms verl's own profiler for step
K+1 through verl's profiler configuration. The legacy and v1 trainers read ``global_profiler.steps`` at the end of
each step to decide whether the next one is profiled, so K+1 added there during step K is profiled by verl itself
(its torch profiler in the training workers, written under ``global_profiler.save_path``).

The stall watch's thread arms (:meth:`NextProfile.arm`: a dict entry; the stall's record names where the profile
goes); the training thread hands the armed steps to verl at its next phase start or end (verl's config is written on
the thread that reads it, never from ours) and marks the same phase's span in step K+1 with a ``verl.capture``
event. Bounded: once per phase, at most VERL_OTEL_CAPTURE_MAX profiled steps per run."""

from __future__ import annotations

import threading
from collections.abc import Callable

from opentelemetry.trace import Span

from verl_otel import semconv as sc
from verl_otel._log import warn_once
from verl_otel.config import CaptureSettings
from verl_otel.process.stall_record import Stall
from verl_otel.telemetry.step_events import StepObserver


def profile_glob(save_path: str, step: int) -> str:
    """Where verl's torch profiler writes ``step``'s traces: ``<save_path>/<role>_<scope>_step<N>_rank<R>...``."""
    return f"{save_path.rstrip('/') or '.'}/*_step{step}_*"


class NextProfile(StepObserver):
    """The trainer's next-step profiles; thread-safe, never raises."""

    def __init__(self, settings: CaptureSettings, span_of: Callable[[str], Span | None]) -> None:
        self._max = settings.max_per_process
        self._span_of = span_of  # the open span of a phase (the step tracer's)
        self._add: Callable[[int], object] | None = None
        self._where = ""
        self._lock = threading.Lock()
        self._armed: dict[int, dict[str, int]] = {}  # step to profile -> {phase: the step whose stall armed it}
        self._phases: set[str] = set()  # phases that armed once (never again)
        self._pending: list[int] = []  # armed steps not handed to verl yet

    def attach(self, add_step: Callable[[int], object], save_path: str) -> None:
        """fit() started with verl's profiler set up: ``add_step(n)`` puts step ``n`` into its
        ``global_profiler.steps`` (hooks/next_profile.py), called on the training thread only."""
        with self._lock:
            self._add, self._where = add_step, save_path
            self._armed.clear()
            self._phases.clear()
            self._pending.clear()

    def detach(self) -> None:
        with self._lock:
            self._add = None

    @property
    def attached(self) -> bool:
        return self._add is not None

    def arm(self, stall: Stall) -> None:
        """A stall was found (the stall watch's thread, before its record is written): its phase's next step is
        profiled, within the bounds, and the record says where."""
        if self._add is None or stall.step < 0:
            return
        step = stall.step + 1
        with self._lock:
            first = step not in self._armed
            if stall.phase in self._phases or (first and len(self._armed) >= self._max):
                return
            self._phases.add(stall.phase)
            self._armed.setdefault(step, {})[stall.phase] = stall.step
            if first:
                self._pending.append(step)
            where = self._where
        stall.next_profile = profile_glob(where, step)

    # -- the training thread (the step tracer's observer) ---------------------------------------------
    def on_phase_start(self, phase: str, global_step: int) -> None:
        self._hand_over()
        step = global_step
        armed_by = self._armed.get(step, {}).get(phase)
        if armed_by is None:
            return
        span = self._span_of(phase)
        if span is not None and span.is_recording():
            span.add_event(
                sc.EVENT_CAPTURE,
                {
                    sc.ATTR_CAPTURE_FILE: profile_glob(self._where, step),
                    sc.ATTR_CAPTURE_TOOL: sc.CAPTURE_TOOL_VERL_PROFILER,
                    sc.ATTR_CAPTURE_ARMED_BY: armed_by,
                },
            )

    def on_phase_end(self, phase: str, global_step: int, seconds: float, trace_id: str) -> None:
        self._hand_over()

    def _hand_over(self) -> None:
        if not self._pending:
            return
        with self._lock:
            steps, self._pending, add = self._pending, [], self._add
        for step in steps:
            try:
                if add is not None:
                    add(step)
            except Exception as exc:  # noqa: BLE001 - verl's config refused: no profile, training goes on
                warn_once("next-profile", f"cannot add step {step} to verl's global_profiler.steps ({exc!r})")


__all__ = ["NextProfile", "profile_glob"]
