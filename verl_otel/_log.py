"""One logger for verl-otel, and warn-once so a broken exporter or a missing hook target says
so a single time instead of flooding a multi-hour training log.

Importing verl-otel configures nothing: the ``verl_otel`` logger gets a ``NullHandler``, as a library's should.
Our one-line output ("[verl-otel] LEVEL message" on stderr, at VERL_OTEL_LOG_LEVEL) is added by :func:`console`
when verl-otel starts working in a process (the start-up hook, ``instrument()``, the CLI, the first warning),
unless the application configured the ``verl_otel`` logger itself (a handler of its own on it): then our lines go
only where it says. Not through the root logger by default: ``import verl`` configures that at WARNING with its
own format (``logging.basicConfig``), which would drop our INFO lines (the step lines) and their prefix."""

from __future__ import annotations

import logging
import threading

from verl_otel import _env

logger = logging.getLogger("verl_otel")
logger.addHandler(logging.NullHandler())

_seen: set[str] = set()
_lock = threading.Lock()
_decided = False  # console() ran in this process
FORMAT = "[verl-otel] %(levelname)s %(message)s"


def _level() -> int:
    return int(getattr(logging, _env.log_level()))


def console() -> None:
    """Add our one-line output, once per process, unless the application has a handler on our logger."""
    global _decided
    if _decided:
        return
    with _lock:
        if _decided:
            return
        _decided = True
        if any(not isinstance(h, logging.NullHandler) for h in logger.handlers):
            return  # the application's: its handlers, level and propagation stand
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
        logger.setLevel(_level())
        logger.propagate = False  # not twice: verl's root handler would repeat the warnings in its format


def warn_once(key: str, message: str) -> None:
    """Log ``message`` as a warning the first time ``key`` is seen in this process."""
    console()
    with _lock:
        if key in _seen:
            return
        _seen.add(key)
    logger.warning(message)
