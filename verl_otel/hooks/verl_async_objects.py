"""The async trainers' objects, read into the plain values the trackers take: fully_async's rollouter and
its trainer's batches, v1's async modes' TransferQueue tags (the steps that submitted the samples); the rest of
verl's objects are read in verl_objects.py. Each reader tolerates other verl versions."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from verl_otel import semconv as sc
from verl_otel.hooks.verl_objects import GLOBAL_STEPS_KEY, as_float, as_int
from verl_otel.telemetry.rollouter import RollouterCounters
from verl_otel.telemetry.values import to_scalar

#: verl's keys, read off the dicts it returns
ROLLOUTER_IDLE_RATIO_KEY = "fully_async/rollouter/idle_ratio"  # reset_staleness()'s timing dict
ROLLOUTER_QUEUE_SIZE_KEY = "monitor/queue/mq_queue_size"  # get_statistics()'s dict


def _max_int(values: Any) -> int | None:
    numbers = [v for v in (as_int(x) for x in (values if values is not None else ())) if v is not None]
    return max(numbers) if numbers else None


def _min_int(values: Any) -> int | None:
    numbers = [v for v in (as_int(x) for x in (values if values is not None else ())) if v is not None]
    return min(numbers) if numbers else None


# -- fully_async's rollouter ------------------------------------------------------------------------
def rollouter_reader(rollouter: Any) -> Callable[[], RollouterCounters]:
    """Reads verl's FullyAsyncRollouter counters when called (at scrape time and at window edges)."""

    def read() -> RollouterCounters:
        try:
            inflight: float | None = float(len(rollouter.active_tasks))
        except (AttributeError, TypeError):
            inflight = None
        return RollouterCounters(
            produced=as_float(rollouter, "total_generated_samples"),
            dropped=as_float(rollouter, "dropped_stale_samples"),
            capacity=as_float(rollouter, "max_queue_size"),
            paused=bool(getattr(rollouter, "paused", False)),
            inflight=inflight,
            window_start=as_float(rollouter, "step_start_time"),
            idle_start=as_float(rollouter, "idle_start_time"),
        )

    return read


def resumed_version(rollouter: Any) -> int | None:
    """The parameter version a resumed rollouter starts at: verl's ``load_checkpoint`` set ``global_steps``
    to version x samples per sync x trigger steps + 1."""
    per_sync = as_float(rollouter, "required_samples") or 0
    trigger = (
        as_float(getattr(getattr(rollouter, "config", None), "async_training", None), "trigger_parameter_sync_step")
        or 1
    )
    steps = as_float(rollouter, GLOBAL_STEPS_KEY) or 1
    return int((steps - 1) // (per_sync * trigger)) if per_sync > 0 and steps > 1 else None


def idle_ratio(timing: Any) -> float | None:
    """verl's idle ratio of the window that ``reset_staleness`` closed (its returned timing dict)."""
    idle = timing.get(ROLLOUTER_IDLE_RATIO_KEY) if isinstance(timing, Mapping) else None
    return float(idle) if isinstance(idle, (int, float)) else None


def queue_size(stats: Any) -> float | None:
    """The message queue's length in the rollouter's ``get_statistics()`` dict."""
    depth = stats.get(ROLLOUTER_QUEUE_SIZE_KEY) if isinstance(stats, Mapping) else None
    return float(depth) if isinstance(depth, (int, float)) else None


def window_tag(rollout_sample: Any) -> tuple[str, int] | None:
    """The (traceparent, version) tag our hook put on verl's RolloutSample, if any."""
    tag = getattr(rollout_sample, sc.ROLLOUT_SAMPLE_TRACE_ATTR, None)
    return tag if isinstance(tag, tuple) and len(tag) == 2 and tag[0] else None


def rollouter_sample_attributes(rollout_sample: Any) -> dict[str, Any]:
    """Attributes of one finished rollouter sample (verl's RolloutSample after generation: its
    ``full_batch`` holds the n responses)."""
    attrs: dict[str, Any] = {}
    sample_id = getattr(rollout_sample, "sample_id", None)
    if sample_id is not None:
        attrs[sc.ATTR_SAMPLE_ID] = str(sample_id)[:128]
    batch: Any = getattr(rollout_sample, "full_batch", None)
    non_tensor = getattr(batch, "non_tensor_batch", None) or {}
    start, end = _min_int(non_tensor.get("min_global_steps")), _max_int(non_tensor.get("max_global_steps"))
    if start is not None:
        attrs[sc.ATTR_PARAM_VERSION] = start
    if end is not None:
        attrs[sc.ATTR_PARAM_VERSION_END] = end
    tensors: Any = getattr(batch, "batch", None)
    try:
        mask = tensors["response_mask"] if "response_mask" in tensors.keys() else None
        attrs[sc.ATTR_SAMPLES] = len(batch)
        if mask is not None:
            attrs[sc.ATTR_SAMPLE_RESPONSE_TOKENS] = int(mask.sum(dim=-1).max())
    except (AttributeError, TypeError, KeyError, RuntimeError, ValueError):
        pass
    metrics = (getattr(batch, "meta_info", None) or {}).get("metrics")
    if isinstance(metrics, list):
        for field_name, attr in sc.SAMPLE_TIMING_ATTRS.items():
            read = [to_scalar(m.get(field_name))[0] for m in metrics if isinstance(m, Mapping)]
            values = [v for v in read if v is not None]
            if values:
                attrs[attr] = max(values)  # the slowest of the n responses
    return attrs


# -- async trainers' batches ------------------------------------------------------------------------
def batch_versions(batch: Any) -> list[int]:
    """The parameter versions the samples of a fully_async trainer batch were generated with."""
    meta = getattr(batch, "meta_info", None) or {}
    versions = meta.get("trajectory_param_versions") if isinstance(meta, Mapping) else None
    numbers = (as_int(v) for v in (versions if versions is not None else ()))  # python or numpy ints
    return [v for v in numbers if v is not None]


def consumed_samples(tags: Sequence[Any]) -> list[tuple[int, int | None]]:
    """(submitting step, finishing weights version) of each real sample in v1's TransferQueue tags."""
    out = []
    for tag in tags:
        if isinstance(tag, Mapping) and not tag.get("is_padding", False):
            submit = as_int(tag.get(GLOBAL_STEPS_KEY))
            if submit is not None:
                out.append((submit, as_int(tag.get("max_global_steps"))))
    return out
