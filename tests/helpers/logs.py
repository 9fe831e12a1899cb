"""verl-otel's own log lines in a test (logger ``verl_otel``, verl_otel/_log.py: once its console output is on
it does not propagate, so pytest's caplog does not see it). Tests ask for the ``otel_log`` fixture
(tests/conftest.py)."""

from __future__ import annotations

import logging


class OtelLog(logging.Handler):
    """The records logged through ``verl_otel``'s logger while attached."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self, level: int = logging.DEBUG) -> list[str]:
        """The messages logged at ``level`` or above."""
        return [r.getMessage() for r in self.records if r.levelno >= level]

    def warnings(self) -> list[str]:
        return self.messages(logging.WARNING)
