"""The goodput split's cost (issue 36), on the real code: ``goodput_step_us``, the step-end accounting of a step with
verl's phases (a rollout, reward, old_log_prob, ref, values, adv, both updates, a weight sync, a validation and a
checkpoint) on a colocated and a standalone rollout pool, run once per step on the trainer's thread. The per-sample
part (the occupancy's two additions per sample start and end) is inside ``progress_update_us`` (micro.py).
``goodput_busy_join_us``: the same step end with the GPUs' measured busy share of its seven GPU phases joined into
the buckets (telemetry/goodput.py::busy_of and the extra attributes), once per step where GPUs are read; the
questions to the GPU processes (one Ray call per process per GPU phase, hooks/goodput.py) are Ray's own cost."""

from __future__ import annotations

import time

NAMES = ("rollout", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor")


def _phases() -> tuple[list[tuple[str, float, float]], float]:
    phases, t = [], 0.0
    for name in (*NAMES, "update_weights", "validate", "save_checkpoint"):
        phases.append((name, t, t + 5.0))
        t += 5.5
    return phases, t


def goodput_step_us(rounds: int = 2000, measured: bool = False) -> float:
    from verl_otel.telemetry.goodput import account, busy_of, pools_of

    phases, t = _phases()
    shares = dict.fromkeys(("rollout", "old_log_prob", "ref", "values", "update_critic", "update_actor"), 0.5)
    pools = pools_of(8, 8)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(rounds):
            split = account(0.0, t, phases, pools, 30.0)
            if measured:
                split.busy = busy_of(split, shares)
            split.attributes()
        best = min(best, (time.perf_counter() - t0) / rounds * 1e6)
    return best


def goodput_busy_join_us(rounds: int = 2000) -> float:
    return goodput_step_us(rounds, measured=True)


if __name__ == "__main__":
    print(f"goodput_step_us {goodput_step_us():.1f}")
    print(f"goodput_busy_join_us {goodput_busy_join_us():.1f}")
