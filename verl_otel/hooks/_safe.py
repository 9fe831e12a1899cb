"""Telemetry code runs inside verl's calls: it must never raise into training."""

from __future__ import annotations

import functools
import threading
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


def once(fn: Callable[..., None]) -> Callable[..., None]:
    """Run ``fn`` the first time only: each kind of process wires its exporters and observers once,
    when its first hook fires (that first hook is also what tells the process' role)."""
    lock = threading.Lock()
    done = False

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        nonlocal done
        with lock:
            if done:
                return
            done = True
        fn(*args, **kwargs)

    return run
