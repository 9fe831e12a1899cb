"""The reward-loop workers asked through Ray (telemetry/reward_emit.py has the when): ``verl_otel_emit_spans``, the
method hooks/targets.py adds to verl's ``RewardLoopWorker``, called remotely; fit end waits with ``ray.wait``."""

from __future__ import annotations

from typing import Any

from verl_otel._log import warn_once

METHOD = "verl_otel_emit_spans"


class RayRewardWorkers:
    """The reward-loop worker handles of one trainer (hooks/verl_objects.py)."""

    def __init__(self, handles: list[Any]) -> None:
        self._handles = handles
        self._off = False

    def ask(self, trace_id: str | None, wait_s: float) -> list[Any]:
        if self._off:
            return []
        refs = []
        for worker in self._handles:
            method = getattr(worker, METHOD, None)
            if method is None:  # made remote without our method (telemetry off where verl made it)
                self._off = True
                warn_once(
                    "reward-emit",
                    "the reward-loop workers have no step-end emit: reward spans are "
                    "emitted after 2 s idle only (a run's last step may lack them)",
                )
                return []
            refs.append(method.remote(trace_id, wait_s))
        return refs

    def wait(self, answers: list[Any], timeout_s: float) -> bool:
        import ray

        return len(ray.wait(answers, num_returns=len(answers), timeout=timeout_s)[0]) == len(answers)
