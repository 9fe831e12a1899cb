"""Telemetry code runs inside verl's calls: it must never raise into training."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from verl_otel._log import warn_once

T = TypeVar("T")


def safe(fn: Callable[..., T], *args: Any) -> T | None:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - any telemetry error; the call it guards must go on
        name = getattr(fn, "__qualname__", repr(fn))
        warn_once(f"safe:{name}", f"telemetry error in {name} (reported once, training continues): {exc!r}")
        return None


class on_exit:  # noqa: N801 - used as a context manager, named for what it does
    """``with on_exit(fn, *args): <verl's call>`` runs ``fn(*args, exc)`` when the call ends, ``exc`` being
    what it raised (None on success, and for a generator closed early), under :func:`safe`; verl's
    exception always propagates. (When ``fn`` needs the call's result, pass it a list the body appends to.)"""

    __slots__ = ("args", "fn")

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.fn, self.args = fn, args

    def __enter__(self) -> on_exit:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is GeneratorExit:  # the consumer stopped iterating: not a failure of the call
            exc = None
        safe(self.fn, *self.args, exc)
