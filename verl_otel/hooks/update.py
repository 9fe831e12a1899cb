"""Training-worker hooks (verl's engine path, ≥ 0.8): actor/critic update progress from
``TrainingWorker.train_mini_batch`` (the total) and ``train_batch`` (one optimizer mini-batch),
a span per worker call that carries the trainer's context (see hooks/worker_group.py), and
per-phase peak accelerator memory (telemetry/memory.py)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from verl_otel import runtime
from verl_otel import semconv as sc
from verl_otel.hooks._safe import safe
from verl_otel.telemetry.memory import PeakMemory
from verl_otel.telemetry.update import TRACKER, UpdateBar


def _wire_worker(rt: runtime.Runtime) -> None:
    """A training worker: update-progress gauges and the [VERL_PROGRESS] actor/critic bar."""
    from verl_otel import config

    rt.state.add_source(TRACKER.readings)
    progress = config.load_progress()
    if progress.enabled:
        _PROGRESS[:] = [progress]
        TRACKER.on_progress.append(UpdateBar(progress))


_PROGRESS: list[Any] = []  # the [VERL_PROGRESS] settings, in a worker where VERL_PROGRESS_LOG is on
_CALLS: dict[str, int] = {}  # calls per role/method in this worker: the step when the batch does not say it


def _step(data: Any, role: str) -> tuple[int, bool]:
    """(the trainer's step, True) from the batch when verl put it there, else (this role's call count, False)."""
    try:
        from verl.utils import tensordict_utils as tu

        step = tu.get(data, "global_steps", None)
        if step is not None:
            return int(step), True
    except Exception:  # noqa: BLE001 - a batch without it
        pass
    return _CALLS.get(role, 0), False


def _strategy(worker: Any, section: str) -> str:
    from verl_otel.telemetry.progress_console import strategy_label

    engine = getattr(worker, "engine_config", None)  # TrainingWorker; ActorRolloutRefWorker has config.<role>
    strategy = getattr(engine, "strategy", None) or getattr(
        getattr(getattr(worker, "config", None), section, None), "strategy", None
    )
    return strategy_label(strategy)


def _wire() -> None:
    runtime.current().wire(sc.ROLE_WORKER, setup=_wire_worker)


def _role(worker: Any) -> str:
    model_type = getattr(getattr(worker, "config", None), "model_type", None)
    return "critic" if model_type == "value_model" else "actor"


def _is_rank0(worker: Any) -> bool:
    return int(getattr(worker, "rank", 0) or 0) == 0


def _begin(worker: Any, data: Any) -> None:
    from verl.utils import tensordict_utils as tu

    _wire()
    dp = int(worker.engine.get_data_parallel_size())
    mini = tu.get(data, "mini_batch_size", None)
    num_mini = tu.get(data, "num_mini_batch", None)
    epochs = int(tu.get(data, "epochs", 1) or 1)
    per_dp = int(data.shape[0])
    per_gpu = per_dp // int(num_mini) if mini is None and num_mini else int(mini) // dp
    role = _role(worker)
    _CALLS[role] = _CALLS.get(role, 0) + 1
    TRACKER.begin(role, per_dp // max(1, per_gpu) * epochs, epochs, _step(data, role)[0], _strategy(worker, role))


def _data(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs.get("data")


def _span(method: str, role: str, worker: Any, data: Any) -> contextlib.AbstractContextManager[Any]:
    """The worker call's span when its batch carries the trainer's context (else a no-op)."""
    from verl_otel.hooks.verl_batches import batch_size, take
    from verl_otel.telemetry.worker_spans import WorkerSpan

    _wire()
    rank = int(getattr(worker, "rank", 0) or 0)
    traceparent = safe(take, data) if data is not None else None  # out of the batch before verl's code sees it
    if traceparent is None:
        return contextlib.nullcontext()
    step, known = safe(_step, data, role) or (-1, False)
    return (
        safe(WorkerSpan, method, role, rank, traceparent, safe(batch_size, data), step if known else -1)
        or contextlib.nullcontext()
    )


def train_mini_batch(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    data = _data(args, kwargs)
    rank0 = _is_rank0(instance)
    role = _role(instance)
    with _span("train_mini_batch", role, instance, data):
        if rank0:  # read the totals before verl pops them from the batch
            safe(_begin, instance, data)
        with PeakMemory(sc.PHASE_UPDATE_CRITIC if role == "critic" else None, "critic"):
            return wrapped(*args, **kwargs)


def infer_batch(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    with _span("infer_batch", _role(instance), instance, _data(args, kwargs)):
        return wrapped(*args, **kwargs)


def train_batch(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    out = wrapped(*args, **kwargs)
    if _is_rank0(instance):
        safe(TRACKER.minibatch_done, _role(instance))
    return out


class _rank0_lines:  # noqa: N801 - used as a context manager
    """The [VERL_PROGRESS] rank-0 start/done lines of a training worker's call (VERL_PROGRESS_LOG=1)."""

    def __init__(self, method: str, role: str, worker: Any, data: Any) -> None:
        self.line: Callable[[float | None], str] | None = None
        if _PROGRESS and _is_rank0(worker):
            safe(self._prepare, method, role, worker, data)

    def _prepare(self, method: str, role: str, worker: Any, data: Any) -> None:
        from verl_otel.telemetry.progress_console import worker_line

        step, known = _step(data, role)
        _CALLS[method] = calls = _CALLS.get(method, 0) + 1  # this method's calls: the step when the batch lacks it
        if not _PROGRESS[0].step_selected(step if known else calls):
            return
        strategy = _strategy(worker, role)
        self.line = lambda seconds: worker_line(step if known else None, role, strategy, 0, method, seconds)
        self.t0 = time.monotonic()

    def __enter__(self) -> None:
        if self.line is not None:
            print(self.line(None), flush=True)

    def __exit__(self, *exc: Any) -> None:
        if self.line is not None and exc[0] is None:
            print(self.line(time.monotonic() - self.t0), flush=True)


def _phase_method(method: str, phase: str, role: str) -> Callable[..., Any]:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        data = _data(args, kwargs)
        with _span(method, role, instance, data), PeakMemory(phase, role), _rank0_lines(method, role, instance, data):
            return wrapped(*args, **kwargs)

    return wrapper


update_actor = _phase_method("update_actor", sc.PHASE_UPDATE_ACTOR, "actor")
compute_log_prob = _phase_method("compute_log_prob", sc.PHASE_OLD_LOG_PROB, "actor")
compute_ref_log_prob = _phase_method("compute_ref_log_prob", sc.PHASE_REF, "ref")
