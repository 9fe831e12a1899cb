"""Async trainers' hooks: fully_async's rollouter as its own service and the trainer's links back to it;
v1's colocate_async / separate_async step links to the steps that submitted their prompts.

``FullyAsyncRollouter`` and ``FullyAsyncTrainer`` are module-level ``@ray.remote`` classes: Ray pickles
them by value, so their methods are patched on the Ray class' ``modified_class`` in the process that
creates the actors (as v1's agent-loop worker in rollout.py). Module globals the pickled methods use
are captured at pickling time, which is why ``assemble_batch_from_rollout_samples`` is replaced by a
module-level function of ours (importable, so pickled by reference) rather than a wrapt proxy.

Rollouter side: fit() opens the first parameter-version window, every ``reset_staleness`` (the
trainer's parameter sync) closes it and opens the next, each sample started gets the window's
(traceparent, version) as an attribute of verl's RolloutSample object, ``do_validate`` is a span.
Trainer side: the attribute comes back out of the MessageQueue with the sample; the step span gets
links to the windows that fed it; staleness and waiting time are gauges.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from verl_otel import semconv as sc
from verl_otel.hooks._safe import once, safe
from verl_otel.hooks.registry import HookTarget
from verl_otel.telemetry.async_rollout import SUBMITS, TRAINER_SIDE, WINDOWS

_MOD = "verl.experimental.fully_async_policy."
_ROLLOUTER = _MOD + "fully_async_rollouter"
_TRAINER = _MOD + "fully_async_trainer"
_QUEUE = _MOD + "message_queue"
_R = "FullyAsyncRollouter.__ray_metadata__.modified_class."
_T = "FullyAsyncTrainer.__ray_metadata__.modified_class."
_MIN = "0.9.0"  # reset_staleness returning verl's timing dict, RolloutSample.full_batch


@once
def _wire_rollouter(rollouter: Any) -> None:
    """First hook in the rollouter actor: this process is the rollouter service."""
    from verl_otel.export import setup
    from verl_otel.telemetry.metrics import STATE

    setup.set_role(sc.ROLE_ROLLOUTER)
    trainer_cfg = getattr(getattr(rollouter, "config", None), "trainer", None)
    if trainer_cfg is not None:
        setup.set_run(trainer_cfg.get("project_name"), trainer_cfg.get("experiment_name"))
    WINDOWS.rollouter = rollouter
    setup.ensure_metrics()
    STATE.add_source(WINDOWS.samples)


@once
def _wire_trainer() -> None:
    from verl_otel.export import setup
    from verl_otel.telemetry.metrics import STATE

    from verl_otel.telemetry.console import STEP_NOTES

    setup.ensure_metrics()
    STATE.add_source(TRAINER_SIDE.samples)
    STEP_NOTES.append(TRAINER_SIDE.console_note)


# -- rollouter ------------------------------------------------------------------------------------
async def _rollouter_fit(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> Any:
    safe(_wire_rollouter, instance)
    safe(WINDOWS.fit_started, instance)
    exc: BaseException | None = None
    try:
        return await wrapped(*args, **kwargs)
    except BaseException as err:
        exc = err
        raise
    finally:
        safe(WINDOWS.fit_ended, exc)


def _tag_sample(sample: Any) -> None:
    tag = WINDOWS.sample_tag()
    if tag is not None:
        setattr(sample, sc.ROLLOUT_SAMPLE_TRACE_ATTR, tag)
        # the agent-loop worker's rollout.worker span joins the window (verl replaces the input
        # batch with the worker's output, whose meta_info is new: nothing reaches the trainer)
        meta = getattr(getattr(sample, "full_batch", None), "meta_info", None)
        if isinstance(meta, dict):
            meta[sc.TRACEPARENT_KEY] = tag[0]


async def _process_sample(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> Any:
    sample = args[0] if args else kwargs.get("rollout_sample")
    safe(_tag_sample, sample)
    start_ns, error = time.time_ns(), None
    try:
        return await wrapped(*args, **kwargs)
    except BaseException as err:
        error = err
        raise
    finally:
        safe(WINDOWS.sample_finished, sample, start_ns, error)


async def _reset_staleness(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                           kwargs: dict[str, Any]) -> Any:
    safe(_wire_rollouter, instance)
    result = await wrapped(*args, **kwargs)
    safe(WINDOWS.param_synced, result if isinstance(result, dict) else None)
    return result


async def _statistics(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Any:
    result = await wrapped(*args, **kwargs)
    if isinstance(result, dict):
        safe(WINDOWS.statistics, result)
    return result


def _load_checkpoint(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
    safe(_wire_rollouter, instance)
    result = wrapped(*args, **kwargs)
    safe(WINDOWS.resumed_from, instance)
    return result


def _do_validate(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> Any:
    safe(_wire_rollouter, instance)
    span = safe(WINDOWS.validate_span)
    exc: BaseException | None = None
    try:
        return wrapped(*args, **kwargs)
    except BaseException as err:
        exc = err
        raise
    finally:
        if span is not None:
            safe(WINDOWS.validate_ended, span, exc)


# -- trainer --------------------------------------------------------------------------------------
async def _get_samples(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> Any:
    safe(_wire_trainer)
    safe(TRAINER_SIDE.wait_started, instance)
    try:
        return await wrapped(*args, **kwargs)
    finally:
        safe(TRAINER_SIDE.wait_ended)


def assemble_batch_from_rollout_samples(rollout_samples: Any, *args: Any, **kwargs: Any) -> Any:
    """Stands in for verl's function of that name in fully_async_trainer (same arguments, same
    result): notes which rollouter windows the samples came from, then calls verl's."""
    from verl.experimental.fully_async_policy import detach_utils

    if isinstance(rollout_samples, (list, tuple)):
        safe(TRAINER_SIDE.samples_assembled, rollout_samples)
    return detach_utils.assemble_batch_from_rollout_samples(rollout_samples, *args, **kwargs)


def _batch_taken(trainer: Any, batch: Any) -> None:
    from verl_otel.telemetry.steps import TRACER

    meta = getattr(batch, "meta_info", None) or {}
    versions = meta.get("trajectory_param_versions")
    versions = list(versions) if versions is not None else []
    TRAINER_SIDE.batch_taken(trainer, versions, TRACER.innermost_span(sc.SPAN_STEP))


def _collect_metrics(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
    result = wrapped(*args, **kwargs)
    batch = args[0] if args else kwargs.get("batch")
    safe(_batch_taken, instance, batch)
    return result


async def _queue_get(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
    result = await wrapped(*args, **kwargs)
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], int):
        TRAINER_SIDE.queue_depth = float(result[1])  # verl's (sample, queue length after the take)
    return result


# -- v1 async trainers (colocate_async / separate_async) ------------------------------------------------
def _step_number(trainer: Any) -> int:
    return int(getattr(trainer, "global_steps", -1))


def _submit(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from verl_otel.telemetry.steps import TRACER

    safe(lambda: SUBMITS.submitted(_step_number(instance), TRACER.innermost_span(sc.SPAN_STEP)))
    return wrapped(*args, **kwargs)


def _v1_step(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from verl_otel.telemetry.steps import TRACER

    batch = wrapped(*args, **kwargs)
    safe(lambda: SUBMITS.consumed(_step_number(instance), list(getattr(batch, "tags", None) or ()),
                                  TRACER.innermost_span(sc.SPAN_STEP)))
    return batch


_V1 = "verl.trainer.ppo.v1.trainer_base"

ASYNC_ROLLOUT_TARGETS: tuple[HookTarget, ...] = (
    HookTarget.actor_method(_ROLLOUTER, _R + "fit", _rollouter_fit, "rollouter generation spans", min_verl=_MIN),
    HookTarget.actor_method(_ROLLOUTER, _R + "_process_single_sample_streaming", _process_sample,
                            "rollouter -> trainer step links", min_verl=_MIN),
    HookTarget.actor_method(_ROLLOUTER, _R + "reset_staleness", _reset_staleness,
                            "rollouter parameter-version windows", min_verl=_MIN),
    HookTarget.actor_method(_ROLLOUTER, _R + "get_statistics", _statistics, "rollouter queue depth",
                            min_verl=_MIN),
    HookTarget.actor_method(_ROLLOUTER, _R + "load_checkpoint", _load_checkpoint,
                            "rollouter parameter version after resume", min_verl=_MIN),
    HookTarget.actor_method(_ROLLOUTER, _R + "do_validate", _do_validate, "rollouter validation spans",
                            min_verl=_MIN),
    HookTarget.actor_method(_TRAINER, _T + "_get_samples_from_queue", _get_samples, "trainer idle ratio",
                            min_verl=_MIN),
    HookTarget.actor_method(_TRAINER, _T + "_collect_metrics_from_samples", _collect_metrics,
                            "staleness gauges and step links", min_verl=_MIN),
    HookTarget(_TRAINER, "assemble_batch_from_rollout_samples", None, "step links to rollouter windows",
               min_verl=_MIN, replace=lambda original: assemble_batch_from_rollout_samples if callable(original)
               else None),
    HookTarget(_QUEUE, "MessageQueueClient.get_sample", _queue_get, "queue depth seen by the trainer",
               min_verl=_MIN),
    HookTarget(_V1, "PPOTrainer._submit_batch_to_rollout", _submit, "v1 step links to submitting steps",
               min_verl=_MIN),
    HookTarget(_V1, "PPOTrainer.step", _v1_step, "v1 step links to submitting steps", min_verl=_MIN),
)
