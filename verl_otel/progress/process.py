"""One process' [VERL_PROGRESS] lines: the settings, loaded once, and what the lines of the fit() process need
between hooks (the phase console's details, the manager's total bar)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from verl_otel import semconv as sc
from verl_otel.config import ProgressSettings
from verl_otel.progress.bars import WorkerCallLines
from verl_otel.progress.console import ProgressConsole, key_preview, rollout_details
from verl_otel.progress.total import TotalBar


class Progress:
    """Off (every method a no-op) unless VERL_PROGRESS_LOG is on. ``console`` is the fit() process' phase
    console once the trainer is wired; ``total`` the manager's bar, made on the first dispatch."""

    def __init__(self, settings: ProgressSettings) -> None:
        self.settings = settings
        self.console: ProgressConsole | None = None
        self.total: TotalBar | None = None
        self._calls: dict[str, int] = {}  # a worker's calls per method: its step when the batch does not say it

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def trainer_console(self) -> ProgressConsole | None:
        """The fit() process' phase console (an observer of the step tracer), made once."""
        if self.enabled and self.console is None:
            self.console = ProgressConsole(self.settings)
        return self.console

    # -- the fit() process ------------------------------------------------------------------------------
    def rollout_dispatched(
        self, step: int, prompts: int, samples: int, shape: tuple[int, ...], meta_keys: Iterable[Any]
    ) -> None:
        """The rollout start line's details: the prompts' shape, n, and the batch's meta keys."""
        if self.console is not None:
            n = samples // max(1, prompts)
            details = rollout_details((prompts, *shape[1:]), n, meta_keys, self.settings.meta_preview)
            self.console.note(sc.PHASE_ROLLOUT, step, details)

    def reward_keys(self, step: int, keys: Iterable[Any]) -> None:
        """The extra-info keys verl's reward returned end the ``reward done`` line."""
        if self.console is not None:
            self.console.note(sc.PHASE_REWARD, step, key_preview(keys, self.settings.meta_preview))

    def total_bar(self, make: type[TotalBar]) -> TotalBar | None:
        """The manager's bar (one thread at most), of the class the hooks ask the workers with."""
        if self.console is None:
            return None
        if self.total is None:
            self.total = make(self.settings)
        return self.total

    # -- a training worker ----------------------------------------------------------------------------
    def worker_call(self, method: str, role: str, strategy: str, step: int, known: bool) -> WorkerCallLines | None:
        """Rank 0's start/done lines of one call (``known``: the batch said its step), when selected."""
        if not self.enabled:
            return None
        self._calls[method] = calls = self._calls.get(method, 0) + 1
        if not self.settings.step_selected(step if known else calls):
            return None
        return WorkerCallLines(step if known else None, role, strategy, method)

    def stop(self) -> None:
        """Its threads (the heartbeat, the total bar's poll) wait for nothing more."""
        if self.console is not None:
            self.console.stop()
        if self.total is not None:
            self.total.stop()
