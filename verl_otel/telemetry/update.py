"""Actor/critic update progress (optimizer mini-batches over all PPO epochs), per role, in a
training worker process; reported by rank 0 only."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from verl_otel import semconv as sc
from verl_otel.process.metrics import Reading
from verl_otel.telemetry.eta import rate_eta


@dataclass
class Update:
    expected: int
    epochs: int
    step: int = -1  # the trainer's step when the batch says it, else this role's update count
    label: str = ""  # the [VERL_PROGRESS] bar label (the engine strategy: dp, megatron)
    completed: int = 0
    start: float = field(default_factory=time.monotonic)
    end: float | None = None

    @property
    def per_epoch(self) -> int:
        return max(1, self.expected // max(1, self.epochs))

    @property
    def epoch(self) -> int:
        """1-based PPO epoch of the mini-batch running now (or the last one, when done)."""
        return position(min(self.completed + 1, max(1, self.expected)), self.per_epoch, self.epochs)[0]

    def last_done(self) -> tuple[int, int]:
        """(epoch, mini-batch within it) of the last finished mini-batch, both 1-based: the bar's text."""
        return position(max(1, self.completed), self.per_epoch, self.epochs)


def position(index: int, per_epoch: int, epochs: int) -> tuple[int, int]:
    """(epoch, mini-batch within the epoch) of the ``index``-th optimizer mini-batch (1-based) of an
    update of ``epochs`` PPO epochs with ``per_epoch`` mini-batches each: the one formula for both."""
    per_epoch = max(1, per_epoch)
    return min(max(1, epochs), (index - 1) // per_epoch + 1), (index - 1) % per_epoch + 1


class UpdateTracker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._updates: dict[str, Update] = {}
        self.on_progress: list[Callable[[str, Update], None]] = []

    def begin(self, role: str, expected: int, epochs: int, step: int = -1, label: str = "") -> None:
        with self._lock:
            self._updates[role] = Update(expected=max(0, expected), epochs=max(1, epochs), step=step, label=label)

    def minibatch_done(self, role: str) -> None:
        with self._lock:
            upd = self._updates.get(role)
            if upd is None:
                return
            upd.completed += 1
            if upd.completed >= upd.expected:
                upd.end = time.monotonic()
        for cb in self.on_progress:
            cb(role, upd)

    def readings(self) -> Iterable[Reading]:
        now = time.monotonic()
        with self._lock:
            rows = [(r, u.expected, u.completed, u.epoch, (u.end or now) - u.start) for r, u in self._updates.items()]
        for role, expected, completed, epoch, elapsed in rows:
            yield sc.UPDATE_MINIBATCHES_EXPECTED, (role,), float(expected)
            yield sc.UPDATE_MINIBATCHES_COMPLETED, (role,), float(completed)
            yield sc.UPDATE_EPOCH, (role,), float(epoch)
            eta = rate_eta(elapsed, completed, expected)
            if eta is not None:
                yield sc.UPDATE_ETA, (role,), eta
