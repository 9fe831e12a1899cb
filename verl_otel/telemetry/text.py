"""Text that telemetry keeps: label values and attributes are valid UTF-8 and bounded, and an
exception becomes a bounded event (a 200 KB message or traceback is cut, never copied whole)."""

from __future__ import annotations

import traceback
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode

from verl_otel import semconv as sc


def utf8(text: str) -> str:
    """``text`` with anything UTF-8 cannot encode (a lone surrogate) replaced."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def as_text(value: Any, limit: int) -> str | None:
    """``str(value)`` cut to ``limit`` and made valid UTF-8; None when the value cannot be turned into text."""
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:  # noqa: BLE001 - a key whose __str__ raises is data we cannot keep
        return None
    if not isinstance(text, str):
        return None
    return utf8(text[:limit])


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def mark_failed(
    span: Span, exc: BaseException, limit: int, *, record: bool = True, description: str | None = None
) -> None:
    """Set ``span`` to ERROR for ``exc``: an ``exception`` event (type, message and stack trace, each
    cut to ``limit`` characters, VERL_OTEL_MAX_TEXT) and the status' description."""
    message = as_text(exc, limit) or "<unprintable>"
    name = type(exc).__qualname__
    if record:
        try:
            stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=20))
        except Exception:  # noqa: BLE001
            stack = ""
        span.add_event(
            "exception",
            {
                sc.ATTR_EXC_TYPE: name,
                sc.ATTR_EXC_MESSAGE: cut(message, limit),
                sc.ATTR_EXC_STACKTRACE: utf8(cut(stack, limit)),
            },
        )
    span.set_status(Status(StatusCode.ERROR, cut(description or f"{name}: {message}", min(limit, 512))))
