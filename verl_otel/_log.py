"""One logger for verl-otel, and warn-once so a broken exporter or a missing hook target says
so a single time instead of flooding a multi-hour training log."""

from __future__ import annotations

import logging
import os
import threading

logger = logging.getLogger("verl_otel")
if not logger.handlers:
    _h = logging.StreamHandler()
    _h.setFormatter(logging.Formatter("[verl-otel] %(levelname)s %(message)s"))
    logger.addHandler(_h)
    logger.setLevel(
        os.environ.get("VERL_OTEL_LOG_LEVEL", "INFO").upper()
        if os.environ.get("VERL_OTEL_LOG_LEVEL", "INFO").upper() in ("DEBUG", "INFO", "WARNING", "ERROR")
        else logging.INFO
    )
    logger.propagate = False

_seen: set[str] = set()
_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    """Log ``message`` as a warning the first time ``key`` is seen in this process."""
    with _lock:
        if key in _seen:
            return
        _seen.add(key)
    logger.warning(message)
