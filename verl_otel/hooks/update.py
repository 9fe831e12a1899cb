"""Training-worker hooks (verl's engine path, ≥ 0.8): actor/critic update progress from
``TrainingWorker.train_mini_batch`` (the total) and ``train_batch`` (one optimizer mini-batch),
a span per worker call that carries the trainer's context (see hooks/worker_group.py), and
per-phase peak accelerator memory (telemetry/memory.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel.hooks._safe import safe
from verl_otel.hooks.verl_objects import worker_batch_step
from verl_otel.hooks.weight_sync import remember_trace
from verl_otel.telemetry.memory import PeakMemory


def _step(data: Any, role: str) -> tuple[int, bool]:
    """(the trainer's step, True) from the batch when verl put it there, else (this role's call count, False)."""
    try:
        step = worker_batch_step(data)
        if step is not None:
            return step, True
    except Exception:  # noqa: BLE001 - a batch without it
        pass
    return trackers.current().worker_calls.get(role, 0), False


def _strategy(worker: Any, section: str) -> str:
    from verl_otel.progress.console import strategy_label

    engine = getattr(worker, "engine_config", None)  # TrainingWorker; ActorRolloutRefWorker has config.<role>
    strategy = getattr(engine, "strategy", None) or getattr(
        getattr(getattr(worker, "config", None), section, None), "strategy", None
    )
    return strategy_label(strategy)


def _wire() -> trackers.Trackers:
    """A training worker (the trackers' row: update-progress gauges, the [VERL_PROGRESS] actor/critic bar)."""
    m = trackers.current()
    m.wire(sc.PROCESS_ROLE_WORKER)
    return m


def _role(worker: Any) -> str:
    model_type = getattr(getattr(worker, "config", None), "model_type", None)
    return "critic" if model_type == "value_model" else "actor"


def _is_rank0(worker: Any) -> bool:
    return int(getattr(worker, "rank", 0) or 0) == 0


def _begin(worker: Any, data: Any) -> None:
    from verl.utils import tensordict_utils as tu

    m = _wire()
    dp = int(worker.engine.get_data_parallel_size())
    mini = tu.get(data, "mini_batch_size", None)
    num_mini = tu.get(data, "num_mini_batch", None)
    epochs = int(tu.get(data, "epochs", 1) or 1)
    per_dp = int(data.shape[0])
    per_gpu = per_dp // int(num_mini) if mini is None and num_mini else int(mini) // dp
    role = _role(worker)
    m.worker_calls[role] = m.worker_calls.get(role, 0) + 1
    m.update.begin(role, per_dp // max(1, per_gpu) * epochs, epochs, _step(data, role)[0], _strategy(worker, role))


def _data(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs.get("data")


def _span(method: str, role: str, worker: Any, data: Any) -> contextlib.AbstractContextManager[Any]:
    """The worker call's span when its batch carries the trainer's context (else a no-op)."""
    from verl_otel.hooks.verl_batches import batch_size, take
    from verl_otel.telemetry.worker_spans import WorkerSpan

    m = _wire()
    rank = int(getattr(worker, "rank", 0) or 0)
    traceparent = safe(take, data) if data is not None else None  # out of the batch before verl's code sees it
    if traceparent is None:
        return contextlib.nullcontext()
    step, known = safe(_step, data, role) or (-1, False)
    safe(remember_trace, worker, traceparent, step if known else -1)  # the step its next weight sync is of
    return (
        safe(WorkerSpan, m.services, method, role, rank, traceparent, safe(batch_size, data), step if known else -1)
        or contextlib.nullcontext()
    )


def train_mini_batch(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    data = _data(args, kwargs)
    rank0 = _is_rank0(instance)
    role = _role(instance)
    with _span("train_mini_batch", role, instance, data):
        if rank0:  # read the totals before verl pops them from the batch
            safe(_begin, instance, data)
        with PeakMemory(
            trackers.current().services.store, sc.PHASE_UPDATE_CRITIC if role == "critic" else None, "critic"
        ):
            return wrapped(*args, **kwargs)


def infer_batch(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    with _span("infer_batch", _role(instance), instance, _data(args, kwargs)):
        return wrapped(*args, **kwargs)


def train_batch(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    out = wrapped(*args, **kwargs)
    if _is_rank0(instance):
        safe(trackers.current().update.minibatch_done, _role(instance))
    return out


def _rank0_lines(method: str, role: str, worker: Any, data: Any) -> contextlib.AbstractContextManager[Any]:
    """The [VERL_PROGRESS] rank-0 start/done lines of a training worker's call (VERL_PROGRESS_LOG=1), printed by
    the progress package; a no-op elsewhere."""
    lines = safe(_call_lines, method, role, worker, data) if _is_rank0(worker) else None
    return lines or contextlib.nullcontext()


def _call_lines(method: str, role: str, worker: Any, data: Any) -> Any:
    progress = trackers.current().progress
    if not progress.enabled:
        return None
    step, known = _step(data, role)
    return progress.worker_call(method, role, _strategy(worker, role), step, known)


def _phase_method(method: str, phase: str, role: str) -> Callable[..., Any]:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        data = _data(args, kwargs)
        store = trackers.current().services.store
        with (
            _span(method, role, instance, data),
            PeakMemory(store, phase, role),
            _rank0_lines(method, role, instance, data),
        ):
            return wrapped(*args, **kwargs)

    return wrapper


update_actor = _phase_method("update_actor", sc.PHASE_UPDATE_ACTOR, "actor")
compute_log_prob = _phase_method("compute_log_prob", sc.PHASE_OLD_LOG_PROB, "actor")
compute_ref_log_prob = _phase_method("compute_ref_log_prob", sc.PHASE_REF, "ref")
