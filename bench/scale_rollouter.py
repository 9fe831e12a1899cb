"""Scale of fully_async's rollouter process (bench/scale.py runs this in a process of its own: it sets environment
variables and the runtime): VERSIONS parameter versions of SAMPLES samples each through the real hooks
(``FullyAsyncRollouter.fit`` around the run, ``_process_single_sample_streaming`` around each sample, given a
RolloutSample-like object whose ``full_batch`` is verl's real DataProto of n=4 responses as the servers return
it, ``reset_staleness`` between versions), the windows' spans exported by the runtime's flusher to the trace file.

Prints ``SCALE_ROLLOUTER {json}``: ``sample_us`` (our cost per sample: hooked minus the same loop unhooked, over
the versions timed), ``rss_warm_mb`` / ``rss_end_mb`` (resident memory after 20 versions and at the end, the
flusher caught up both times), ``pending_groups`` (windows whose samples are still held at the end) and
``spans`` (spans in the trace file).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _drive(coro: Any) -> Any:
    """Run a coroutine that never suspends (the stand-in rollouter awaits nothing that waits)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("the stand-in rollouter suspended")


def main(versions: int, samples: int, timed: int) -> dict[str, float]:
    data = Path(tempfile.mkdtemp(prefix="verl-otel-scale-"))
    os.environ.update(VERL_OTEL_DIR=str(data), VERL_OTEL_CONSOLE="0")
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto

    from verl_otel import runtime, trackers
    from verl_otel.hooks import async_rollout

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from scale_trainer import rss_mb

    runtime.reset_for_tests()
    rt = runtime.current()
    n = 4

    def batch(version: int) -> Any:  # what verl's servers return for one prompt x n
        return DataProto.from_dict(
            tensors={"responses": torch.ones(n, 3, dtype=torch.long), "response_mask": torch.tensor([[1, 1, 0]] * n)},
            non_tensors={
                "min_global_steps": np.array([version] * n, dtype=object),
                "max_global_steps": np.array([version] * n, dtype=object),
            },
            meta_info={"metrics": [{"generate_sequences": 0.5, "tool_calls": 0.0}] * n},
        )

    class Sample:  # verl's RolloutSample: what the hooks read and write
        def __init__(self, i: int, version: int) -> None:
            self.sample_id = f"sample_{version}_{i}"
            self.full_batch = batch(version)

    class Rollouter:  # the attributes of verl's FullyAsyncRollouter the hooks read
        config = OmegaConf.create({"trainer": {"project_name": "p", "experiment_name": "e"}})
        total_generated_samples = dropped_stale_samples = 0
        max_queue_size, paused, active_tasks = 1024, False, set()
        step_start_time = idle_start_time = time.time()

    rollouter = Rollouter()

    async def process(sample: Any) -> None:  # verl's generation of one sample, into the queue
        rollouter.total_generated_samples += 1

    async def reset() -> dict[str, float]:  # the trainer's parameter sync
        rollouter.step_start_time = time.time()
        return {"fully_async/rollouter/idle_ratio": 0.1}

    hooked_s, plain_s, out = [], [], {}

    async def fit() -> None:
        for version in range(versions):
            made = [Sample(i, version) for i in range(samples)]  # not timed: verl's own objects
            t0 = time.perf_counter()
            for sample in made:
                await async_rollout.process_sample(process, rollouter, (sample,), {})
            hooked = time.perf_counter() - t0
            if version < timed:
                made = [Sample(i, version) for i in range(samples)]
                t0 = time.perf_counter()
                for sample in made:
                    await process(sample)
                plain_s.append(time.perf_counter() - t0)
                hooked_s.append(hooked)
            await async_rollout.reset_staleness(reset, rollouter, (), {})
            if version % 20 == 19:
                rt.flush_wait(30)  # the flusher keeps up, as it does between real parameter syncs
            if version == 19:
                out["rss_warm_mb"] = rss_mb()

    _drive(async_rollout.rollouter_fit(fit, rollouter, (), {}))
    rt.flush_wait(60)
    out["rss_end_mb"] = rss_mb()
    spans = trackers.current().windows.sample_spans
    out["pending_groups"] = len(spans._groups) if spans is not None else 0
    files = [p for p in data.glob("traces.jsonl*") if not p.name.endswith(".lock")]
    out["spans"] = sum(line.count(b'"spanId"') for p in files for line in p.read_bytes().splitlines())
    if hooked_s:
        out["sample_us"] = max(0.0, (min(hooked_s) - min(plain_s)) / samples * 1e6)
    return out


if __name__ == "__main__":
    versions, samples, timed = (int(x) for x in sys.argv[1:4])
    print("SCALE_ROLLOUTER " + json.dumps(main(versions, samples, timed)), flush=True)
    os._exit(0)  # the runtime's exit flush has nothing left to do
