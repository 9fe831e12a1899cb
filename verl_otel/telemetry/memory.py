"""Peak accelerator memory of one training phase, as ``verl_phase_peak_memory_bytes{phase,role}``
(where torch.cuda is available; on a CPU there is nothing to read)."""

from __future__ import annotations

from typing import Any

from verl_otel import semconv as sc
from verl_otel.process.metrics import MetricStore


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a device that cannot say: no reading, the phase goes on
        return None


class PeakMemory:
    """``with PeakMemory(state, phase, role):`` resets torch.cuda's peak counter and records the peak at exit.
    ``phase=None`` records nothing (a call that is not a phase of its own)."""

    __slots__ = ("cuda", "phase", "role", "store")

    def __init__(self, store: MetricStore, phase: str | None, role: str) -> None:
        self.store, self.phase, self.role = store, phase, role
        self.cuda: Any = None
        if phase is not None:
            try:
                import torch

                if torch.cuda.is_available():
                    self.cuda = torch.cuda
            except Exception:  # noqa: BLE001 - no torch, or a broken CUDA install: no readings
                pass

    def __enter__(self) -> None:
        if self.cuda is not None:
            _safe(self.cuda.reset_peak_memory_stats)

    def __exit__(self, *exc: object) -> None:
        if self.cuda is not None:
            _safe(self._record)  # the phase's own exception (if any) propagates; ours never does

    def _record(self) -> None:
        peak = self.cuda.max_memory_allocated()
        self.store.set(sc.PHASE_PEAK_MEMORY, (self.phase or "", self.role), float(peak))
