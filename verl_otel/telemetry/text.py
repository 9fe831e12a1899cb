"""An exception on a span becomes a bounded event (a 200 KB message or traceback is cut, never copied whole,
by :mod:`verl_otel.process.text`)."""

from __future__ import annotations

import traceback

from opentelemetry.trace import Span, Status, StatusCode

from verl_otel import semconv as sc
from verl_otel.process.text import as_text, cut, utf8


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
