"""The goodput split's cost (issue 36), on the real code: ``goodput_step_us``, the step-end accounting of a step with
verl's phases (a rollout, reward, old_log_prob, ref, values, adv, both updates, a weight sync, a validation and a
checkpoint) on a colocated and a standalone rollout pool, run once per step on the trainer's thread. The per-sample
part (the occupancy's two additions per sample start and end) is inside ``progress_update_us`` (micro.py)."""

from __future__ import annotations

import time


def goodput_step_us(rounds: int = 2000) -> float:
    from verl_otel.telemetry.goodput import account, pools_of

    names = ("rollout", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor")
    phases, t = [], 0.0
    for name in (*names, "update_weights", "validate", "save_checkpoint"):
        phases.append((name, t, t + 5.0))
        t += 5.5
    pools = pools_of(8, 8)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(rounds):
            account(0.0, t, phases, pools, 30.0).attributes()
        best = min(best, (time.perf_counter() - t0) / rounds * 1e6)
    return best


if __name__ == "__main__":
    print(f"goodput_step_us {goodput_step_us():.1f}")
