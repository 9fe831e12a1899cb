"""The trainer's trace context in verl's own batch objects, so Ray workers can join the step trace.

verl sends its work to Ray actors as one of three batch types; each has a place for batch-level
extras that survives verl's chunking (dispatch copies it into every chunk):
``DataProto.meta_info``, ``KVBatchMeta.extra_info`` (v1, TransferQueue) and a non-tensor entry of a
``TensorDict``. The caller puts the W3C traceparent there for the duration of one call
(:func:`put`, undone afterwards so the trainer's batch is left as it was) and the worker takes it
out again before verl's code sees the batch (:func:`take`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl_otel import semconv as sc

_KEY = sc.TRACEPARENT_KEY


def nontensor(value: Any) -> Any:
    """The plain value of a TensorDict non-tensor entry (NonTensorData / a stack of them)."""
    data = getattr(value, "data", value)
    if isinstance(data, (list, tuple)):
        return data[0] if data else None
    return data


def _is_tensordict(obj: Any) -> bool:
    try:
        from tensordict import TensorDictBase
    except ImportError:  # pragma: no cover - verl always brings tensordict
        return False
    return isinstance(obj, TensorDictBase)


def _meta_dict(batch: Any) -> dict[str, Any] | None:
    """The batch's dict of batch-level extras (DataProto / KVBatchMeta), if it has one."""
    for attr in ("meta_info", "extra_info"):
        meta = getattr(batch, attr, None)
        if isinstance(meta, dict):
            return meta
    return None


def find_batch(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The first argument that can carry a traceparent."""
    for value in (*args, *kwargs.values()):
        if _is_tensordict(value) or _meta_dict(value) is not None:
            return value
    return None


def put(batch: Any, traceparent: str) -> Callable[[], None] | None:
    """Put ``traceparent`` into ``batch``; returns the undo, or None when the batch has no place."""
    meta = _meta_dict(batch)
    if meta is not None:
        had, old = _KEY in meta, meta.get(_KEY)
        meta[_KEY] = traceparent

        def undo_meta() -> None:
            if had:
                meta[_KEY] = old
            else:
                meta.pop(_KEY, None)

        return undo_meta
    if _is_tensordict(batch):
        from verl.utils import tensordict_utils as tu

        had_td = _KEY in batch.keys()
        old_td = batch.get(_KEY) if had_td else None
        tu.assign_non_tensor(batch, **{_KEY: traceparent})

        def undo_td() -> None:
            if had_td:
                batch.set(_KEY, old_td)
            else:
                batch.pop(_KEY, None)

        return undo_td
    return None


def take(batch: Any) -> str | None:
    """Remove and return the traceparent carried by ``batch`` (None if it carries none)."""
    meta = _meta_dict(batch)
    if meta is not None:
        value = meta.pop(_KEY, None)
        return str(value) if value else None
    if _is_tensordict(batch) and _KEY in batch.keys():
        value = nontensor(batch.pop(_KEY))
        return str(value) if value else None
    return None


def batch_size(batch: Any) -> int | None:
    """Rows in one of verl's batches (DataProto, TensorDict, KVBatchMeta); None when it cannot say."""
    for probe in (lambda b: len(b), lambda b: int(b.shape[0]), lambda b: len(b.keys)):
        try:
            return int(probe(batch))
        except Exception:  # noqa: BLE001 - each batch type knows its size differently
            continue
    return None


def token_counts(batch: Any) -> tuple[int, int] | None:
    """(prompt, response) tokens of a generated DataProto: its attention mask summed over the prompt columns and
    over the response columns (two tensor sums a batch, no per-sample work); None when it cannot say."""
    try:
        tensors = batch.batch
        mask = tensors["attention_mask"]
        width = int(tensors["responses"].shape[-1])
        response = tensors["response_mask"] if "response_mask" in tensors.keys() else mask[:, -width:]
        return int(mask[:, :-width].sum()), int(response.sum())
    except Exception:  # noqa: BLE001 - not a generated batch (or another verl's layout)
        return None
