"""The demo's reward function when ``--hang reward@STEP=SECONDS`` is asked for (``reward.custom_reward_function``):
verl's own score, but the first training sample of step STEP hangs for SECONDS in here first, as a user's reward
function stuck on a remote judge would. Steps are counted from the training samples this reward worker scored
(``VERL_OTEL_DEMO_REWARD_CALLS`` per step; validation samples do not count)."""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any

from verl_otel.demo.slow import HANG_ENV, SlowSpec, planted_hang

ENV_CALLS = "VERL_OTEL_DEMO_REWARD_CALLS"
_count = itertools.count()
_lock = threading.Lock()
_hung: set[int] = set()


def compute_score(data_source: Any, solution_str: Any, ground_truth: Any, extra_info: Any = None, **kw: Any) -> Any:
    from verl.utils.reward_score import default_compute_score

    if isinstance(extra_info, dict) and extra_info.get("split") == "train":
        per_step = max(1, int(os.environ.get(ENV_CALLS, "8")))
        with _lock:
            step = next(_count) // per_step + 1
            seconds = SlowSpec.from_env(HANG_ENV).seconds("reward", step)
            first = seconds > 0 and step not in _hung
            _hung.add(step)
        if first:
            planted_hang(seconds)
    return default_compute_score(data_source, solution_str, ground_truth, extra_info, **kw)
