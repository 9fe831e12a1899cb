"""This process' resident memory (``verl_process_resident_memory_bytes``), read on the flusher's tick (never on
a training thread) from /proc/self/statm at most every ``every_s`` seconds; nothing where /proc is missing."""

from __future__ import annotations

import os
import time

from verl_otel import semconv as sc
from verl_otel.process.metrics import MetricStore

READ_EVERY_S = 5.0


class ResidentMemory:
    """A flusher task: ``runtime.every_tick(ResidentMemory(state))``."""

    def __init__(self, store: MetricStore, every_s: float = READ_EVERY_S, statm: str = "/proc/self/statm") -> None:
        self.store, self.every_s, self.statm = store, every_s, statm
        self._next = 0.0
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.off = not os.path.exists(statm)

    def __call__(self) -> None:
        now = time.monotonic()
        if self.off or now < self._next:
            return
        self._next = now + self.every_s
        try:
            with open(self.statm, "rb") as f:
                pages = int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            self.off = True  # one warning-free try: a platform without it stays without the reading
            return
        self.store.set(sc.PROCESS_RESIDENT_MEMORY, (), float(pages * self._page))
