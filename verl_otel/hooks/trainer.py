"""Trainer-process hooks: fit(), verl's phase timer, validation and the step's metrics log.

``verl.utils.profiler.performance._timer`` is the one function every trainer's ``marked_timer``
variant (plain, nvtx, mstx) delegates to, looked up at call time: wrapping it covers the legacy,
v1 and async trainers. It is a generator used with ``yield from``, so the wrapper is one too.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from typing import Any

from verl_otel import runtime
from verl_otel import semconv as sc
from verl_otel.hooks import verl_objects as verl
from verl_otel.hooks._safe import on_exit, safe
from verl_otel.hooks.reward_flush import REWARD_FLUSH
from verl_otel.telemetry.steps import TRACER


def _wire_trainer(rt: runtime.Runtime) -> None:
    """The process where fit() runs: the metrics, console and progress observers, once."""
    from verl_otel import config
    from verl_otel.telemetry import progress_console
    from verl_otel.telemetry.console import StepConsole
    from verl_otel.telemetry.trainer_metrics import TrainerMetrics

    TRACER.observers.append(TrainerMetrics(rt.state))
    TRACER.observers.append(REWARD_FLUSH)  # the reward workers' spans at each step's end
    if rt.settings.console:
        TRACER.observers.append(StepConsole())
    progress = config.load_progress()
    if progress.enabled:
        console = progress_console.ProgressConsole(progress)
        progress_console.install(console)
        TRACER.observers.append(console)


def declare_run(trainer: Any) -> None:
    info = verl.run_info(trainer, "")
    runtime.current().wire(sc.ROLE_TRAINER, project=info.project, experiment=info.experiment, setup=_wire_trainer)


def start_fit(trainer: Any, kind: str) -> None:
    """verl's trainer ``trainer`` (a ``kind`` trainer) entered fit()."""
    TRACER.fit_started(verl.run_info(trainer, kind), verl.global_step_reader(trainer))
    REWARD_FLUSH.attach(verl.reward_workers(trainer))


def _end_fit(exc: BaseException | None) -> None:
    """A sync fit() ended: the trainer's own exports, then the reward workers' within what is left of the
    budget (fully_async's coroutine fit() has no reward-loop workers of its own)."""
    safe(TRACER.fit_ended, exc)
    safe(REWARD_FLUSH.fit_end)


_WATCHED_TIMERS = frozenset((sc.VERL_TIMER_STEP, *sc.VERL_TIMER_TO_PHASE))


def _phase_generator(gen: Generator[Any, Any, Any], name: str) -> Generator[Any, Any, Any]:
    with on_exit(TRACER.phase_exit, safe(TRACER.phase_enter, name)):
        return (yield from gen)


def timer_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    gen = wrapped(*args, **kwargs)
    name = args[0] if args else kwargs.get("name")
    # agent loops time every sample through the same function: only whitelisted names cost a span
    if name not in _WATCHED_TIMERS or not TRACER.active:
        return gen
    return _phase_generator(gen, name)


def _fit_wrapper(kind: str) -> Callable[..., Any]:
    """fit() is a plain method in the legacy and v1 trainers and a coroutine in fully_async's."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        safe(declare_run, instance)
        safe(start_fit, instance, kind)
        if inspect.iscoroutinefunction(wrapped):
            return _fit_async(wrapped(*args, **kwargs))
        with on_exit(_end_fit):
            return wrapped(*args, **kwargs)

    return wrapper


async def _fit_async(coro: Any) -> Any:
    with on_exit(TRACER.fit_ended):
        return await coro


def validate_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    token = safe(TRACER.validate_enter) if TRACER.active else None
    with on_exit(_validate_exit, token):
        result = wrapped(*args, **kwargs)
        if TRACER.active:  # the validation's metric keys name its data sources (its samples do not)
            from verl_otel.telemetry import val_generations

            safe(val_generations.record_data_sources, result)
        return result


def _validate_exit(token: Any, exc: BaseException | None) -> None:
    if token is not None:
        TRACER.validate_exit(token, exc)


def log_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return wrapped(*args, **kwargs)
    finally:
        data = args[0] if args else kwargs.get("data")
        step = args[1] if len(args) > 1 else kwargs.get("step")
        if isinstance(data, dict):
            safe(TRACER.metrics_logged, data, step)


def extract_reward_wrapper(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """verl's ``extract_reward(batch)`` inside the ``reward`` phase: its extra-info keys end the [VERL_PROGRESS]
    ``reward done`` line."""
    result = wrapped(*args, **kwargs)
    safe(_note_reward_keys, result)
    return result


def _note_reward_keys(result: Any) -> None:
    from verl_otel.telemetry import progress_console as pc

    console = pc.active()
    in_reward = TRACER.innermost_span(sc.PHASE_REWARD) is not None  # not validation's call
    if (
        console is not None
        and in_reward
        and isinstance(result, tuple)
        and len(result) == 2
        and isinstance(result[1], dict)
    ):
        pc.note(sc.PHASE_REWARD, TRACER.step_number, pc.key_preview(result[1], console.settings.meta_preview))


def val_generations_wrapper(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    try:
        return wrapped(*args, **kwargs)
    finally:
        samples = args[1] if len(args) > 1 else kwargs.get("samples")
        step = args[2] if len(args) > 2 else kwargs.get("step")
        if isinstance(samples, (list, tuple)):
            from verl_otel.telemetry import val_generations

            safe(val_generations.record, samples, step)


def fit_fully_async(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A module-level function (Ray pickles the actor class by value; this is pickled by reference, a
    closure would drag TRACER and its lock along)."""
    return _FULLY_ASYNC_FIT(wrapped, instance, args, kwargs)


_FULLY_ASYNC_FIT = _fit_wrapper(sc.TRAINER_FULLY_ASYNC)
fit_legacy = _fit_wrapper(sc.TRAINER_LEGACY)
fit_v1 = _fit_wrapper(sc.TRAINER_V1)


def fit_step_fully_async(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """fully_async's ``fit_step()`` is one step: it logs inside its ``step`` timer and validates and
    checkpoints after it, so the step trace spans the call, not the timer."""
    coro = wrapped(*args, **kwargs)
    return _scoped_step(coro) if TRACER.active else coro


async def _scoped_step(coro: Any) -> Any:
    safe(TRACER.step_scope_enter)
    with on_exit(TRACER.step_scope_exit):
        return await coro


def fit_validate_fully_async(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """fully_async's ``_fit_validate()`` asks the rollouter to validate (no timer, mostly a no-op):
    a ``validate`` phase is added when validation metrics came back during the call."""
    coro = wrapped(*args, **kwargs)
    return _validation_window(coro) if TRACER.active else coro


async def _validation_window(coro: Any) -> Any:
    start = safe(TRACER.validation_window_start)
    try:
        return await coro
    finally:
        if start is not None:
            safe(TRACER.validation_window_end, start)
