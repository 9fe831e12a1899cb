"""Trainer-process hooks: fit(), verl's phase timer, validation and the step's metrics log.

``verl.utils.profiler.performance._timer`` is the one function every trainer's ``marked_timer``
variant (plain, nvtx, mstx) delegates to, looked up at call time: wrapping it covers the legacy,
v1 and async trainers. It is a generator used with ``yield from``, so the wrapper is one too.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from typing import Any

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel.hooks import verl_objects as verl
from verl_otel.hooks._safe import on_exit, safe
from verl_otel.hooks.goodput import watch_gpu_busy
from verl_otel.hooks.reward_emit import RayRewardWorkers
from verl_otel.hooks.worker_flush import WorkerFlush, fit_end, for_owner
from verl_otel.telemetry.steps import StepTracer


def _steps() -> StepTracer:
    return trackers.current().steps


def declare_run(trainer: Any) -> None:
    """The process where fit() runs (the trackers' trainer row: metrics, reward emit, console lines)."""
    info = verl.run_info(trainer, "")
    trackers.current().wire(sc.PROCESS_ROLE_TRAINER, project=info.project, experiment=info.experiment)


def start_fit(trainer: Any, kind: str) -> None:
    """verl's trainer ``trainer`` (a ``kind`` trainer) entered fit()."""
    m = trackers.current()
    m.steps.fit_started(verl.run_info(trainer, kind), verl.global_step_reader(trainer))
    m.reward_emit.attach(RayRewardWorkers(verl.reward_workers(trainer)))
    watch_gpu_busy(m, trainer)  # the goodput buckets' measured busy share, where the workers read their GPUs
    if m.services.settings.capture.next_step:  # a stall may arm verl's profiler for the next step
        from verl_otel.hooks import next_profile

        next_profile.attach(trainer, kind, m.next_profile)


def _end_fit(workers: WorkerFlush | None, exc: BaseException | None) -> None:
    """A fit() ended: the workers (reward-loop workers included) flush or spill while the trainer's own exports
    run (fully_async's coroutine fit() has no reward-loop workers of its own: its rollouter's are asked at the
    rollouter's fit end)."""
    m = trackers.current()
    fit_end(workers, lambda: m.steps.fit_ended(exc), m.reward_emit.fit_end)  # reward: when not asked above


_WATCHED_TIMERS = frozenset((sc.VERL_TIMER_STEP, *sc.VERL_TIMER_TO_PHASE))


def _phase_generator(gen: Generator[Any, Any, Any], name: str, steps: StepTracer) -> Generator[Any, Any, Any]:
    with on_exit(steps.phase_exit, safe(steps.phase_enter, name)):
        return (yield from gen)


def timer_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    gen = wrapped(*args, **kwargs)
    name = args[0] if args else kwargs.get("name")
    # agent loops time every sample through the same function: only whitelisted names cost a span
    if name not in _WATCHED_TIMERS:
        return gen
    steps = _steps()
    return _phase_generator(gen, name, steps) if steps.active else gen


def _fit_wrapper(kind: str) -> Callable[..., Any]:
    """fit() is a plain method in the legacy and v1 trainers and a coroutine in fully_async's."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        safe(declare_run, instance)
        safe(start_fit, instance, kind)
        if inspect.iscoroutinefunction(wrapped):
            return _fit_async(wrapped(*args, **kwargs), instance)
        with on_exit(_end_fit, safe(for_owner, instance)):
            return wrapped(*args, **kwargs)

    return wrapper


async def _fit_async(coro: Any, trainer: Any) -> Any:
    with on_exit(_end_fit, safe(for_owner, trainer)):
        return await coro


def validate_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    m = trackers.current()
    token = safe(m.steps.validate_enter) if m.steps.active else None
    with on_exit(_validate_exit, m.steps, token):
        result = wrapped(*args, **kwargs)
        if m.steps.active:  # the validation's metric keys name its data sources (its samples do not)
            from verl_otel.telemetry import val_generation_events

            safe(lambda: val_generation_events.record_data_sources(m.validation_span(), result))
        return result


def _validate_exit(steps: StepTracer, token: Any, exc: BaseException | None) -> None:
    if token is not None:
        steps.validate_exit(token, exc)


def log_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return wrapped(*args, **kwargs)
    finally:
        data = args[0] if args else kwargs.get("data")
        step = args[1] if len(args) > 1 else kwargs.get("step")
        if isinstance(data, dict):
            safe(_steps().metrics_logged, data, step)


def extract_reward_wrapper(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """verl's ``extract_reward(batch)`` inside the ``reward`` phase: its extra-info keys end the [VERL_PROGRESS]
    ``reward done`` line."""
    result = wrapped(*args, **kwargs)
    safe(_note_reward_keys, result)
    return result


def _note_reward_keys(result: Any) -> None:
    m = trackers.current()
    in_reward = m.steps.innermost_span(sc.PHASE_REWARD) is not None  # not validation's call
    if in_reward and isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict):
        m.progress.reward_keys(m.steps.step_number, result[1])


def val_generations_wrapper(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    try:
        return wrapped(*args, **kwargs)
    finally:
        samples = args[1] if len(args) > 1 else kwargs.get("samples")
        step = args[2] if len(args) > 2 else kwargs.get("step")
        if isinstance(samples, (list, tuple)):
            from verl_otel.telemetry import val_generation_events

            m = trackers.current()
            safe(lambda: val_generation_events.record(m.services, m.validation_span(), samples, step))


def fit_fully_async(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A module-level function (Ray pickles the actor class by value; this is pickled by reference, a
    closure would drag the trackers and their locks along)."""
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
    steps = _steps()
    return _scoped_step(coro, steps) if steps.active else coro


async def _scoped_step(coro: Any, steps: StepTracer) -> Any:
    safe(steps.step_scope_enter)
    with on_exit(steps.step_scope_exit):
        return await coro


def fit_validate_fully_async(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """fully_async's ``_fit_validate()`` asks the rollouter to validate (no timer, mostly a no-op):
    a ``validate`` phase is added when validation metrics came back during the call."""
    coro = wrapped(*args, **kwargs)
    steps = _steps()
    return _validation_window(coro, steps) if steps.active else coro


async def _validation_window(coro: Any, steps: StepTracer) -> Any:
    start = safe(steps.validation_window_start)
    try:
        return await coro
    finally:
        if start is not None:
            safe(steps.validation_window_end, start)
