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
from verl_otel import trackers
from verl_otel.hooks import verl_async_objects as verl_async
from verl_otel.hooks import verl_objects as verl
from verl_otel.hooks._safe import on_exit, safe
from verl_otel.hooks.reward_emit import RayRewardWorkers
from verl_otel.hooks.worker_flush import WorkerFlush, fit_end, for_owner
from verl_otel.telemetry.rollouter import RolloutWindows


def _windows() -> RolloutWindows:
    return trackers.current().windows


def _wire_rollouter(rollouter: Any) -> None:
    """First hook in the rollouter actor: this process is the rollouter service (the trackers' row: its gauges)."""
    m = trackers.current()
    if m.windows.read is None:  # this process is the rollouter from its first hooked call on, fit() or not
        m.windows.read = verl_async.rollouter_reader(rollouter)
    m.wire(sc.PROCESS_ROLE_ROLLOUTER, **verl.run_names(rollouter))


def _wire_trainer() -> trackers.Trackers:
    """fully_async's trainer process (the trackers' row: its gauges, its note on the step line)."""
    m = trackers.current()
    m.wire(sc.PROCESS_ROLE_TRAINER, key=trackers.FULLY_ASYNC_TRAINER)
    return m


# -- rollouter ------------------------------------------------------------------------------------
async def rollouter_fit(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    safe(_wire_rollouter, instance)
    windows = _windows()
    safe(windows.fit_started, verl_async.rollouter_reader(instance))
    gpus: int | None = safe(verl.rollout_gpus, instance)
    windows.gpus = gpus or 1
    safe(lambda: trackers.current().reward_emit.attach(RayRewardWorkers(verl.reward_workers(instance))))
    with on_exit(_rollouter_end, windows, safe(for_owner, instance)):
        return await wrapped(*args, **kwargs)


def _rollouter_end(windows: RolloutWindows, workers: WorkerFlush | None, exc: BaseException | None) -> None:
    """The rollouter's fit() ended: its agent-loop, replica and reward-loop workers flush or spill while its own
    window and spans are flushed (hooks/worker_flush.py)."""
    fit_end(workers, lambda: windows.fit_ended(exc))


def _tag_sample(sample: Any) -> None:
    windows = _windows()
    tag = windows.sample_tag()
    meta = getattr(getattr(sample, "full_batch", None), "meta_info", None)
    if isinstance(meta, dict):  # the worker's console lines say the version (the rollouter has no step)
        meta[sc.PARAM_VERSION_KEY] = windows.version
    if tag is not None:
        setattr(sample, sc.ROLLOUT_SAMPLE_TRACE_ATTR, tag)
        # the agent-loop worker's rollout.worker span joins the window (verl replaces the input
        # batch with the worker's output, whose meta_info is new: nothing reaches the trainer)
        meta = getattr(getattr(sample, "full_batch", None), "meta_info", None)
        if isinstance(meta, dict):
            meta[sc.TRACEPARENT_KEY] = tag[0]


async def process_sample(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    sample = args[0] if args else kwargs.get("rollout_sample")
    safe(_tag_sample, sample)
    with on_exit(_sample_finished, sample, time.time_ns()):
        return await wrapped(*args, **kwargs)


def _sample_finished(sample: Any, start_ns: int, error: BaseException | None) -> None:
    tag = verl_async.window_tag(sample)
    if tag is not None:
        end_ns = time.time_ns()
        # only the window's slowest samples become spans: the others' batches are not read (bench/scale.py: at
        # 10k samples per version, reading every one cost ~20 µs a sample, mostly a torch reduction)
        windows = _windows()
        keep = windows.keeps(tag, end_ns - start_ns)
        windows.sample_finished(
            tag, start_ns, verl_async.rollouter_sample_attributes(sample) if keep else {}, error, end_ns
        )


async def reset_staleness(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    safe(_wire_rollouter, instance)
    result = await wrapped(*args, **kwargs)
    safe(lambda: _windows().param_synced(verl_async.idle_ratio(result)))
    return result


async def statistics(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = await wrapped(*args, **kwargs)
    depth = safe(verl_async.queue_size, result)
    if depth is not None:
        _windows().queue_depth = depth
    return result


def load_checkpoint(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    safe(_wire_rollouter, instance)
    result = wrapped(*args, **kwargs)
    version = safe(verl_async.resumed_version, instance)
    if version is not None:
        _windows().resumed_at(version)
    return result


def do_validate(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    safe(_wire_rollouter, instance)
    windows = _windows()
    with on_exit(windows.validate_ended, safe(windows.validate_span)):
        return wrapped(*args, **kwargs)


# -- trainer --------------------------------------------------------------------------------------
async def get_samples(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    m = safe(_wire_trainer) or trackers.current()
    safe(m.trainer_side.wait_started, _param_version_reader(instance))
    try:
        return await wrapped(*args, **kwargs)
    finally:
        safe(m.trainer_side.wait_ended)


def assemble_batch_from_rollout_samples(rollout_samples: Any, *args: Any, **kwargs: Any) -> Any:
    """Stands in for verl's function of that name in fully_async_trainer (same arguments, same
    result): notes which rollouter windows the samples came from, then calls verl's."""
    from verl.experimental.fully_async_policy import detach_utils

    from verl_otel.hooks.rollout import count_tokens

    if isinstance(rollout_samples, (list, tuple)):
        side = trackers.current().trainer_side
        safe(lambda: side.samples_assembled([t for t in map(verl_async.window_tag, rollout_samples) if t]))
    batch = detach_utils.assemble_batch_from_rollout_samples(rollout_samples, *args, **kwargs)
    safe(count_tokens, batch)  # the step's training batch, in its gen phase (as the legacy manager's output)
    return batch


def _batch_taken(trainer: Any, batch: Any) -> None:
    m = trackers.current()
    reader = _param_version_reader(trainer)
    m.trainer_side.param_version = reader
    m.trainer_side.batch_taken(reader(), verl_async.batch_versions(batch), m.steps.innermost_span(sc.SPAN_STEP))


def _param_version_reader(trainer: Any) -> Callable[[], float | None]:
    return lambda: verl.as_float(trainer, "current_param_version")


def collect_metrics(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = wrapped(*args, **kwargs)
    batch = args[0] if args else kwargs.get("batch")
    safe(_batch_taken, instance, batch)
    return result


async def queue_get(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = await wrapped(*args, **kwargs)
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], int):
        trackers.current().trainer_side.queue_taken(float(result[1]))  # verl's (sample, queue length after the take)
    return result


# -- v1 async trainers (colocate_async / separate_async) ------------------------------------------------
def submit(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    m = trackers.current()
    safe(lambda: m.submits.submitted(verl.global_step(instance), m.steps.innermost_span(sc.SPAN_STEP)))
    return wrapped(*args, **kwargs)


def v1_step(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    batch = wrapped(*args, **kwargs)
    m = trackers.current()
    safe(
        lambda: m.submits.consumed(
            verl.global_step(instance),
            verl_async.consumed_samples(getattr(batch, "tags", None) or ()),
            m.steps.innermost_span(sc.SPAN_STEP),
        )
    )
    return batch


def replace_assemble(original: Any) -> Any:
    """verl's module function, replaced by ours (importable, so Ray pickles it by reference)."""
    return assemble_batch_from_rollout_samples if callable(original) else None
