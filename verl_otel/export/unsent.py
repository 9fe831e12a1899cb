"""This process' span buffers (span_buffer.py), spilled together when the shutdown budget is spent: what the
collector did not take in time goes to ``$VERL_OTEL_DIR/unsent/`` for ``verl-otel push``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from verl_otel import semconv as sc
from verl_otel._log import logger, warn_once


class _Spillable(Protocol):
    def spill(self) -> int: ...


class UnsentSpans:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.buffers: list[_Spillable] = []
        self._told = 0  # spans waiting in unsent/ that the last line named

    def add(self, buffer: _Spillable) -> None:
        self.buffers.append(buffer)

    def spill_now(self) -> int:
        """An abrupt end (export/run_end.py): every buffer to disk now, if this process has any."""
        return self.spill("the OTLP endpoint") if self.buffers else 0

    def spill(self, destination: str) -> int:
        """Every buffer's unsent spans to disk; one line when more wait there than last said. Returns how
        many wait. Never raises."""
        waiting = 0
        for buffer in list(self.buffers):
            try:
                waiting += buffer.spill()
            except Exception as exc:  # noqa: BLE001
                warn_once("spill", f"cannot write the unsent spans ({exc!r})")
        if waiting > self._told:
            self._told = waiting
            logger.warning(
                "%d spans of pid %s could not be sent to %s in time; they wait in %s "
                "(send them with: verl-otel push --dir %s)",
                waiting,
                os.getpid(),
                destination,
                self.data_dir / sc.UNSENT_DIR,
                self.data_dir,
            )
        return waiting
