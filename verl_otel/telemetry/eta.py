"""ETA arithmetic and the [VERL_PROGRESS] text progress bar."""

from __future__ import annotations

from collections import deque


def rate_eta(elapsed_s: float, done: int, total: int) -> float | None:
    """Remaining seconds at the average rate so far; None before the first item finishes."""
    if done <= 0 or total <= 0 or elapsed_s < 0:
        return None
    if done >= total:
        return 0.0
    return elapsed_s / done * (total - done)


class RunEta:
    """Run ETA from the mean of the last ``window`` step durations (recent steps say more about
    the rest of the run than the first, slow, warm-up ones)."""

    def __init__(self, window: int = 5) -> None:
        self._recent: deque[float] = deque(maxlen=max(1, window))

    def add_step(self, seconds: float) -> None:
        if seconds >= 0:
            self._recent.append(seconds)

    def eta(self, current_step: int, planned: int | None) -> float | None:
        if not planned or not self._recent:
            return None
        remaining = max(0, planned - current_step)
        return sum(self._recent) / len(self._recent) * remaining


def bar(done: int, total: int, width: int = 24) -> str:
    """``[########------------]`` for done/total (the [VERL_PROGRESS] format)."""
    width = max(1, width)
    filled = 0 if total <= 0 else min(width, int(width * min(done, total) / total))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def fmt_s(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds:.1f}s"
