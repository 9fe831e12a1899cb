"""The step tracer's open phase and open step, and the two rules it reads them by."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span

from verl_otel import semconv as sc
from verl_otel.telemetry.propagation import phase_span_id
from verl_otel.telemetry.step_tokens import StepTokens


@dataclass
class _Open:
    name: str
    span: Span
    start: float
    watch: int | None = None  # the stall watch's token
    done: bool = False  # ended by an abrupt end before verl's timer closed it


@dataclass
class _Step:
    number: int
    span: Span
    start: float
    phases: dict[str, float] = field(default_factory=dict)  # seconds, summed over a phase's runs
    runs: dict[str, int] = field(default_factory=dict)
    phase_tokens: dict[str, int] = field(default_factory=dict)  # tokens handled, summed over a phase's runs
    open: list[_Open] = field(default_factory=list)
    error: bool = False
    scoped: bool = False  # ends at fit_step()'s return, not at the metrics log
    stopped: bool = False  # ended by verl's stop signal: no training happened in it
    metrics: dict[str, Any] = field(default_factory=dict)  # logged during a scoped step
    val_logged: bool = False  # validation metrics logged since the last validation window opened
    tail: bool = False  # fit.end: the work after a scoped run's last step, not a step
    tokens: StepTokens | None = None  # the training batch's (rollout's output), once the hooks counted them
    failed_in: str | None = None  # the phase an exception came out of first (the innermost)
    ran: list[tuple[str, float, float]] = field(default_factory=list)  # (phase, start, end), monotonic: goodput
    sync_id_given: bool = False  # a weight-sync phase span of this step has the derivable id (phase_span_id)

    def add_phase(self, name: str, seconds: float, tokens: int | None = None, *, start: float) -> None:
        """A run of phase ``name`` ended, started at ``start`` (monotonic): what the step span's summary says of its
        phases, and when it ran (goodput)."""
        self.phases[name] = self.phases.get(name, 0.0) + seconds
        self.ran.append((name, start, start + seconds))
        self.runs[name] = self.runs.get(name, 0) + 1
        if tokens:
            self.phase_tokens[name] = self.phase_tokens.get(name, 0) + tokens


def known_id(step: _Step, phase: str) -> int | None:
    """The step's first weight-sync phase span (update_weights; fully_async: param_sync) gets the id its workers
    derive from the step's trace (their ``weights.sync`` goes under it: verl's call carries no context)."""
    if phase not in sc.WEIGHT_SYNC_PHASES or step.sync_id_given:
        return None
    step.sync_id_given = True
    return phase_span_id(step.span.get_span_context().trace_id, sc.PHASE_UPDATE_WEIGHTS)


def is_stop(exc: BaseException | None) -> bool:
    """verl's normal end of training (fully_async's closed queue), not an error."""
    return exc is not None and type(exc).__name__ in sc.VERL_STOP_EXCEPTIONS
