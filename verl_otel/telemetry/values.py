"""Turning whatever verl logs into a finite float, or saying why not."""

from __future__ import annotations

import math
from typing import Any

from verl_otel import semconv as sc


def to_scalar(value: Any) -> tuple[float | None, str | None]:
    """(value, None) for a finite scalar; (None, drop_reason) otherwise. Accepts Python and numpy
    numbers and single-element arrays/tensors (through ``.item()``); never raises."""
    try:
        if isinstance(value, (bool, int, float)):
            out = float(value)
        else:
            item = getattr(value, "item", None)
            if not callable(item):
                return None, sc.DROP_NON_SCALAR
            out = float(item())  # multi-element arrays/tensors raise here
    except Exception:  # noqa: BLE001 - huge ints, odd objects
        return None, sc.DROP_NON_SCALAR
    if not math.isfinite(out):
        return None, sc.DROP_NON_FINITE
    return out, None
