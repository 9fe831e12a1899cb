"""Telemetry code runs inside verl's calls: it must never raise into training."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from verl_otel._log import warn_once

T = TypeVar("T")


def safe(fn: Callable[..., T], *args: Any) -> T | None:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001
        name = getattr(fn, "__qualname__", repr(fn))
        warn_once(f"safe:{name}", f"telemetry error in {name} (reported once, training continues): {exc!r}")
        return None
