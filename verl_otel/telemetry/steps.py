"""Step traces: one trace per trainer global step, one child span per phase.

The trainer hooks feed events in (fit start/end, timer enter/exit, validate enter/exit, metrics
logged); this module turns them into spans and tells observers (metrics, console) what happened.
The step span opens at verl's ``step`` timer (or at a validation outside any step, for the
validation before training) and ends when the step's metrics are logged, so it includes
validation, as verl's own ``timing_s`` does not. fully_async's trainer logs inside its step and
validates and checkpoints after its ``step`` timer: there the step is the whole ``fit_step()`` call
(a *scoped* step, opened and closed by that hook) and the logs only add to it; what it runs after
its last step (weight sync, validation, final checkpoint) goes under a ``fit.end`` root, not a step.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from verl_otel import semconv as sc
from verl_otel._log import logger
from verl_otel.telemetry.goodput import GpuBusy, Occupancy, Split, pools_of, step_split
from verl_otel.telemetry.open_step import _Open, _Step, is_stop, known_id
from verl_otel.telemetry.run_end import attributes_of
from verl_otel.telemetry.services import Services
from verl_otel.telemetry.step_events import RunInfo, StepObserver, StepResult
from verl_otel.telemetry.step_summary import write_summary
from verl_otel.telemetry.step_tokens import StepTokens
from verl_otel.telemetry.text import mark_failed
from verl_otel.telemetry.values import to_scalar


class StepTracer:
    """The fit() process' steps and phases, as verl's timers open and close them. Thread-safe; never raises."""

    def __init__(self, services: Services) -> None:
        self._svc = services
        self._lock = threading.RLock()
        self._global_step: Callable[[], int] | None = None  # reads verl's trainer.global_steps while fit() runs
        self._run: RunInfo | None = None
        self._step: _Step | None = None
        self._scoped_run = False  # steps are fit_step() calls (fully_async)
        self._last_number = -1  # the last step that trained
        self.observers: list[StepObserver] = []
        self.occupancy: Occupancy | None = None  # the rollout's, for the goodput split (hooks/rollout.py)
        self.gpu_busy: GpuBusy | None = None  # the GPUs' measured busy share, joined into it (hooks/goodput.py)

    # -- inputs from the hooks ----------------------------------------------------------------
    def fit_started(self, run: RunInfo, global_step: Callable[[], int]) -> None:
        """fit() started a run; ``global_step()`` reads the trainer's step counter (hooks/verl_objects.py)."""
        with self._lock:
            self._global_step = global_step
            self._run = run
            self._scoped_run, self._last_number = False, -1
            self._svc.declare(sc.PROCESS_ROLE_TRAINER)
        self._notify("on_fit_start", self._run)

    def fit_ended(self, exc: BaseException | None) -> None:
        with self._lock:
            if self._step is not None:
                if is_stop(exc):
                    self._step.stopped = True
                elif exc is not None:
                    self._fail(self._step, exc)
                    self._end_run(self._step, attributes_of(exc, deprecated_names=self._svc.settings.deprecated_names))
                self._end_step(metrics=self._step.metrics or None)
            self._global_step = None
        self._svc.flush_wait()

    def phase_enter(self, verl_name: str) -> _Open | None:
        """verl's timer opened ``verl_name``; returns a token for :meth:`phase_exit`."""
        if verl_name == sc.VERL_TIMER_STEP:
            with self._lock:
                self._ensure_step()
            return None
        phase = sc.VERL_TIMER_TO_PHASE.get(verl_name)
        if phase is None:
            return None
        return self._open_phase(phase)

    def phase_exit(self, token: _Open | None, exc: BaseException | None) -> None:
        if token is None or token.done:  # None, or ended already by an abrupt end (abort)
            return
        with self._lock:
            step = self._step
            seconds = time.monotonic() - token.start
            if is_stop(exc):
                token.span.set_attribute(sc.ATTR_STOPPED, True)
                if step is not None:
                    step.stopped = True
            elif exc is not None:
                mark_failed(token.span, exc, self._svc.settings.max_text)
                token.span.set_attributes(attributes_of(exc, deprecated_names=self._svc.settings.deprecated_names))
                if step is not None:
                    step.failed_in = step.failed_in or token.name
                    self._fail(step, exc, record=False)
            tokens = None
            if step is not None and step.tokens is not None:
                attrs = step.tokens.phase_attributes(token.name, seconds)
                token.span.set_attributes(attrs)
                tokens = attrs.get(sc.ATTR_PHASE_TOKENS)
            token.span.end()
            self._unwatch(token)
            number = -1
            trace_id = format(token.span.get_span_context().trace_id, "032x")
            if step is not None:
                number = step.number
                step.add_phase(token.name, seconds, tokens, start=token.start)
                if token in step.open:
                    step.open.remove(token)
        self._notify("on_phase_end", token.name, number, seconds, trace_id)

    def abort(self, attributes: Mapping[str, Any]) -> bool:
        """The process is about to go (a signal): the open step and its open phases end now, ERROR, with the
        run_end ``attributes`` (reason, detail, ...). Waits for the lock briefly only: the caller is racing a
        SIGKILL. Returns whether a step was open."""
        if not self._lock.acquire(timeout=0.5):
            return False
        try:
            step = self._step
            if step is None or step.tail:
                return False
            self._end_run(step, attributes)
            self._end_step(metrics=step.metrics or None, tell=False)  # the observers' work would delay the write
            return True
        finally:
            self._lock.release()

    def tokens_seen(self, prompt: int, response: int, separate: bool = False) -> None:
        """The open step's training batch came out of the rollout with these token counts (summed when the
        rollout runs more than once in a step); phases that end after this carry their tokens (``separate``: a
        mini-batch the step trains on its own, whose phases carry its tokens only)."""
        with self._lock:
            step = self._step
            if step is not None:
                old = step.tokens
                step.tokens = (StepTokens(0, 0) if old is None else old).plus(prompt, response, separate)

    def validate_enter(self) -> _Open | None:
        """verl's ``_validate`` started. Inside a step the ``testing`` timer already made the
        span; outside one (validation before training) it starts that step's own trace."""
        with self._lock:
            if self._step is not None and any(o.name == sc.PHASE_VALIDATE for o in self._step.open):
                return None
        return self._open_phase(sc.PHASE_VALIDATE)

    def validate_exit(self, token: _Open | None, exc: BaseException | None) -> None:
        self.phase_exit(token, exc)

    def metrics_logged(self, data: Mapping[str, Any], step: Any) -> None:
        """``Tracking.log``: the step's metrics are out; the step trace ends here (a scoped step
        keeps them for its end)."""
        try:
            number = int(step)
        except (TypeError, ValueError):
            number = -1
        with self._lock:
            current = self._step
            if current is not None and current.scoped:
                current.metrics.update(data)
                if any(str(k).startswith(sc.VERL_VAL_METRIC_PREFIX) for k in data):
                    current.val_logged = True
            elif current is not None:
                self._end_step(metrics=data)
        self._notify("on_metrics", data, number)

    def step_scope_enter(self) -> None:
        """fully_async's ``fit_step()`` started: the step trace spans the whole call."""
        with self._lock:
            if self._step is not None:
                self._end_step(self._step.metrics)  # a leftover (should not happen)
            self._scoped_run = True
            self._ensure_step(scope=True)

    def step_scope_exit(self, exc: BaseException | None) -> None:
        with self._lock:
            step = self._step
            if step is None or not step.scoped:
                return
            if is_stop(exc):
                step.stopped = True
            elif exc is not None:
                self._fail(step, exc)
            self._end_step(step.metrics)

    def validation_window_start(self) -> int:
        """fully_async validates through a remote call without a timer; the ``validate`` phase is
        made afterwards, from this start, if validation metrics were logged in between."""
        with self._lock:
            if self._step is not None:
                self._step.val_logged = False
        return time.time_ns()

    def validation_window_end(self, start_ns: int) -> None:
        with self._lock:
            step = self._step
            if step is None or not step.val_logged:
                return
            step.val_logged = False
            parent = step.open[-1].span if step.open else step.span
            span = self._svc.tracer().start_span(
                sc.PHASE_VALIDATE,
                context=trace.set_span_in_context(parent),
                start_time=start_ns,
                attributes={sc.ATTR_PHASE: sc.PHASE_VALIDATE, sc.ATTR_GLOBAL_STEP: step.number},
            )
            span.end()
            seconds = max(0.0, (time.time_ns() - start_ns) / 1e9)
            step.add_phase(sc.PHASE_VALIDATE, seconds, start=time.monotonic() - seconds)
            number, trace_id = step.number, format(span.get_span_context().trace_id, "032x")
        # known only now that its metrics came back: the start is told late, so observers see start, then end
        self._notify("on_phase_start", sc.PHASE_VALIDATE, number)
        self._notify("on_phase_end", sc.PHASE_VALIDATE, number, seconds, trace_id)

    def current_context(self) -> otel_context.Context | None:
        """Context of the innermost open span (for propagation to Ray workers)."""
        with self._lock:
            step = self._step
            if step is None:
                return None
            span = step.open[-1].span if step.open else step.span
            return trace.set_span_in_context(span)

    def innermost_span(self, name: str) -> Span | None:
        """The innermost open span called ``name`` (the step span for ``step``), if any."""
        with self._lock:
            step = self._step
            if step is None:
                return None
            for token in reversed(step.open):
                if token.name == name:
                    return token.span
            return step.span if name == sc.SPAN_STEP else None

    @property
    def step_number(self) -> int:
        """The open step's number (-1 outside a step)."""
        step = self._step
        return -1 if step is None else step.number

    @property
    def active(self) -> bool:
        """True while a fit() runs in this process (timers elsewhere, e.g. agent loops, are ignored)."""
        return self._global_step is not None

    # -- internals --------------------------------------------------------------------------
    def _step_counter(self) -> int:
        read = self._global_step
        return -1 if read is None else read()

    def _ensure_step(self, scope: bool = False) -> _Step:
        if self._step is not None:
            return self._step
        number = self._step_counter()
        # a phase outside fit_step() in a scoped run: verl's work after the last step (ended by fit_ended)
        tail = self._scoped_run and not scope
        if tail:
            number = self._last_number
        run = self._run
        attrs: dict[str, Any] = {sc.ATTR_GLOBAL_STEP: number}
        if run is not None:
            attrs.update(
                {sc.ATTR_TRAINER: run.trainer, sc.ATTR_PROJECT: run.project, sc.ATTR_EXPERIMENT: run.experiment}
            )
            for key, val in (
                (sc.ATTR_ROLLOUT_N, run.rollout_n),
                (sc.ATTR_BATCH_SIZE, run.batch_size),
                (sc.ATTR_STEPS_PLANNED, run.steps_planned),
                (sc.ATTR_TRAINER_MODE, run.mode),
                (sc.ATTR_VERL_VERSION, run.verl_version),
            ):
                if val is not None:
                    attrs[key] = val
        # a fresh root: each step is its own trace whatever context the caller runs in
        name = sc.SPAN_FIT_END if tail else sc.SPAN_STEP
        span = self._svc.tracer().start_span(name, context=otel_context.Context(), attributes=attrs)
        self._step = _Step(number=number, span=span, start=time.monotonic(), scoped=scope or tail, tail=tail)
        return self._step

    def _open_phase(self, phase: str) -> _Open | None:
        with self._lock:
            step = self._ensure_step()
            parent = step.open[-1].span if step.open else step.span
            known = known_id(step, phase) if phase in sc.WEIGHT_SYNC_PHASES else None
            with self._svc.preset_span_id(known) if known else contextlib.nullcontext():
                span = self._svc.tracer().start_span(
                    phase,
                    context=trace.set_span_in_context(parent),
                    attributes={sc.ATTR_PHASE: phase, sc.ATTR_GLOBAL_STEP: step.number},
                )
            token = _Open(phase, span, time.monotonic())
            stalls = self._svc.stalls()
            if stalls is not None:
                token.watch = stalls.enter(phase, step=step.number, parent=span)
            step.open.append(token)
            number = step.number
        self._notify("on_phase_start", phase, number)
        return token

    def _end_run(self, step: _Step, attributes: Mapping[str, Any]) -> None:
        """The run ends in this step: its open phases and the step carry what ended it (ERROR), the step also
        the innermost phase open then."""
        described = f"{attributes.get(sc.ATTR_RUN_END_REASON)}: {attributes.get(sc.ATTR_RUN_END_DETAIL)}"
        for token in step.open:
            token.span.set_attributes(attributes)
            token.span.set_status(Status(StatusCode.ERROR, described))
        attrs = dict(attributes)
        phase = step.open[-1].name if step.open else step.failed_in
        if phase:
            attrs[sc.ATTR_RUN_END_PHASE] = phase
        step.span.set_attributes(attrs)
        if not step.error:  # an exception's own status (Ray's text: the pid and class) stays
            step.span.set_status(Status(StatusCode.ERROR, described))
        step.error = True

    def _fail(self, step: _Step, exc: BaseException, record: bool = True) -> None:
        step.error = True
        mark_failed(step.span, exc, self._svc.settings.max_text, record=record)

    def _end_step(self, metrics: Mapping[str, Any] | None, tell: bool = True) -> None:
        step = self._step
        if step is None:
            return
        self._step = None
        for token in reversed(step.open):  # phases left open by an exception path or an abrupt end
            if sc.ATTR_RUN_END_REASON not in getattr(token.span, "attributes", {}):
                token.span.set_status(Status(StatusCode.ERROR, "phase did not finish"))
            token.span.end()
            token.done = True
            step.ran.append((token.name, token.start, time.monotonic()))
            self._unwatch(token)
        span = step.span
        stalls = self._svc.stalls()
        if stalls is not None:
            span.set_attribute(sc.ATTR_STEP_STALLS, stalls.stalls_in(step.number))
        if metrics:
            for key, attr in sc.STEP_METRIC_ATTRS.items():
                if key in metrics:
                    val, _ = to_scalar(metrics[key])
                    if val is not None:
                        span.set_attribute(attr, val)
            epoch, _ = to_scalar(metrics.get("training/epoch"))
            if epoch is not None:
                span.set_attribute(sc.ATTR_EPOCH, int(epoch))
        if step.tokens is not None:
            span.set_attributes(step.tokens.step_attributes())
        if step.phases:
            slowest = max(step.phases, key=step.phases.__getitem__)
            span.set_attribute(sc.ATTR_PHASE_SLOWEST, slowest)
        seconds = time.monotonic() - step.start
        if step.stopped or step.tail:
            # verl's stop signal: an empty step, not a training step (no step-end event, no ERROR);
            # fit.end is not a step either
            if step.stopped:
                span.set_attribute(sc.ATTR_STOPPED, True)
            span.end()
            self._svc.flush_soon()
            return
        split = self._goodput(step)
        span.end()
        write_summary(self._svc.tracer(), span, step)
        self._last_number = step.number
        if not tell:
            return
        trace_id = format(span.get_span_context().trace_id, "032x")
        result = StepResult(step.number, seconds, dict(step.phases), trace_id, step.error, step.tokens, split)
        self._notify("on_step_end", result)
        self._svc.flush_soon()

    def _goodput(self, step: _Step) -> Split | None:
        """The step's GPU time split (semconv/goodput.py) onto its span; the rollout's occupancy and the GPUs' busy
        shares were asked for as each phase ended, so reading them here does not wait."""
        pools = (self._run.pools if self._run is not None else ()) or pools_of(None, None)
        split = step_split(pools, (step.start, time.monotonic()), step.ran, step.number, self.occupancy, self.gpu_busy)
        if split is not None:
            step.span.set_attributes(split.attributes())
        return split

    def _notify(self, method: str, *args: Any) -> None:
        for obs in list(self.observers):
            try:
                getattr(obs, method)(*args)
            except Exception as exc:  # noqa: BLE001 - an observer bug must not reach training
                logger.debug("observer %s.%s failed: %s", type(obs).__name__, method, exc)

    def _unwatch(self, token: _Open) -> None:
        if token.watch is not None:
            stalls = self._svc.stalls()
            if stalls is not None:
                stalls.exit(token.watch)
            token.watch = None


__all__ = ["RunInfo", "StepObserver", "StepResult", "StepTracer", "is_stop"]
