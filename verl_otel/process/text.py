"""Text that we keep: label values and attributes are valid UTF-8 and bounded (a 200 KB message is cut,
never copied whole). Below the exporters and the trackers, which both keep text."""

from __future__ import annotations

from typing import Any


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
