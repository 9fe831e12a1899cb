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
from verl_otel.hooks._safe import once, safe
from verl_otel.hooks.registry import HookTarget
from verl_otel.telemetry.steps import TRACER



def _declare_run(trainer: Any) -> None:
    from verl_otel.export import setup
    from verl_otel.telemetry.steps import run_info_from_trainer

    info = run_info_from_trainer(trainer, "")
    setup.set_role(sc.ROLE_TRAINER)
    setup.set_run(info.project, info.experiment)


@once
def _wire_observers() -> None:
    """Attach the console (and metrics) observers once, in the process where fit() runs."""
    from verl_otel import config
    from verl_otel.export import setup
    from verl_otel.telemetry.console import StepConsole
    from verl_otel.telemetry.metrics import STATE
    from verl_otel.telemetry.progress_console import ProgressConsole
    from verl_otel.telemetry.trainer_metrics import TrainerMetrics

    setup.set_role(sc.ROLE_TRAINER)
    setup.ensure_metrics()
    TRACER.observers.append(TrainerMetrics(STATE))
    if setup.get().settings.console:
        TRACER.observers.append(StepConsole())
    progress = config.load_progress()
    if progress.enabled:
        TRACER.observers.append(ProgressConsole(progress))

_WATCHED_TIMERS = frozenset((sc.VERL_TIMER_STEP, *sc.VERL_TIMER_TO_PHASE))


def _phase_generator(gen: Generator[Any, Any, Any], name: str) -> Generator[Any, Any, Any]:
    token = safe(TRACER.phase_enter, name)
    exc: BaseException | None = None
    try:
        return (yield from gen)
    except GeneratorExit:
        raise
    except BaseException as err:
        exc = err
        raise
    finally:
        safe(TRACER.phase_exit, token, exc)


def _timer_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    gen = wrapped(*args, **kwargs)
    name = args[0] if args else kwargs.get("name")
    # agent loops time every sample through the same function: only whitelisted names cost a span
    if name not in _WATCHED_TIMERS or not TRACER.active:
        return gen
    return _phase_generator(gen, name)


def _fit_wrapper(kind: str) -> Callable[..., Any]:
    """fit() is a plain method in the legacy and v1 trainers and a coroutine in fully_async's."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        safe(_declare_run, instance)
        safe(_wire_observers)
        safe(TRACER.fit_started, instance, kind)
        if inspect.iscoroutinefunction(wrapped):
            return _fit_async(wrapped(*args, **kwargs))
        exc: BaseException | None = None
        try:
            return wrapped(*args, **kwargs)
        except BaseException as err:
            exc = err
            raise
        finally:
            safe(TRACER.fit_ended, exc)

    return wrapper


async def _fit_async(coro: Any) -> Any:
    exc: BaseException | None = None
    try:
        return await coro
    except BaseException as err:
        exc = err
        raise
    finally:
        safe(TRACER.fit_ended, exc)


def _validate_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    token = safe(TRACER.validate_enter) if TRACER.active else None
    exc: BaseException | None = None
    try:
        result = wrapped(*args, **kwargs)
        if TRACER.active:  # the validation's metric keys name its data sources (its samples do not)
            from verl_otel.telemetry import val_generations

            safe(val_generations.record_data_sources, result)
        return result
    except BaseException as err:
        exc = err
        raise
    finally:
        if token is not None:
            safe(TRACER.validate_exit, token, exc)


def _log_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return wrapped(*args, **kwargs)
    finally:
        data = args[0] if args else kwargs.get("data")
        step = args[1] if len(args) > 1 else kwargs.get("step")
        if isinstance(data, dict):
            safe(TRACER.metrics_logged, data, step)


def _val_generations_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                             kwargs: dict[str, Any]) -> Any:
    try:
        return wrapped(*args, **kwargs)
    finally:
        samples = args[1] if len(args) > 1 else kwargs.get("samples")
        step = args[2] if len(args) > 2 else kwargs.get("step")
        if isinstance(samples, (list, tuple)):
            from verl_otel.telemetry import val_generations

            safe(val_generations.record, samples, step)


def _fit_fully_async(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A module-level function (Ray pickles the actor class by value; this is pickled by reference, a
    closure would drag TRACER and its lock along)."""
    return _FULLY_ASYNC_FIT(wrapped, instance, args, kwargs)


_FULLY_ASYNC_FIT = _fit_wrapper(sc.TRAINER_FULLY_ASYNC)


def _fit_step_fully_async(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> Any:
    """fully_async's ``fit_step()`` is one step: it logs inside its ``step`` timer and validates and
    checkpoints after it, so the step trace spans the call, not the timer."""
    coro = wrapped(*args, **kwargs)
    return _scoped_step(coro) if TRACER.active else coro


async def _scoped_step(coro: Any) -> Any:
    safe(TRACER.step_scope_enter)
    exc: BaseException | None = None
    try:
        return await coro
    except BaseException as err:
        exc = err
        raise
    finally:
        safe(TRACER.step_scope_exit, exc)


def _fit_validate_fully_async(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                              kwargs: dict[str, Any]) -> Any:
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


_LEGACY = "verl.trainer.ppo.ray_trainer"
_V1 = "verl.trainer.ppo.v1.trainer_base"

TRAINER_TARGETS: tuple[HookTarget, ...] = (
    HookTarget("verl.utils.profiler.performance", "_timer", _timer_wrapper, "phase spans"),
    HookTarget(_LEGACY, "RayPPOTrainer.fit", _fit_wrapper(sc.TRAINER_LEGACY), "legacy trainer step traces"),
    HookTarget(_LEGACY, "RayPPOTrainer._validate", _validate_wrapper, "legacy validation spans"),
    HookTarget(_V1, "PPOTrainer.fit", _fit_wrapper(sc.TRAINER_V1), "v1 trainer step traces", min_verl="0.9.0"),
    HookTarget(_V1, "PPOTrainer._validate", _validate_wrapper, "v1 validation spans", min_verl="0.9.0"),
    # a module-level @ray.remote class, pickled by value: patched on its modified_class (the ActorClass'
    # own attribute is never called in the actor)
    HookTarget.actor_method("verl.experimental.fully_async_policy.fully_async_trainer",
                            "FullyAsyncTrainer.__ray_metadata__.modified_class.fit",
                            _fit_fully_async, "fully_async trainer step traces",
                            min_verl="0.8.0"),
    HookTarget.actor_method("verl.experimental.fully_async_policy.fully_async_trainer",
                            "FullyAsyncTrainer.__ray_metadata__.modified_class.fit_step",
                            _fit_step_fully_async, "fully_async step spans ending after validation",
                            min_verl="0.8.0"),
    HookTarget.actor_method("verl.experimental.fully_async_policy.fully_async_trainer",
                            "FullyAsyncTrainer.__ray_metadata__.modified_class._fit_validate",
                            _fit_validate_fully_async, "fully_async validate phase", min_verl="0.8.0"),
    HookTarget("verl.utils.tracking", "Tracking.log", _log_wrapper, "step ends and training curves"),
    HookTarget("verl.utils.tracking", "ValidationGenerationsLogger.log", _val_generations_wrapper,
               "validation generations on the validate span"),
)
