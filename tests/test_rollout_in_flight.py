"""The agent-loop sample hook (``run_agent_loop``) with every sample of a batch in flight at once, as verl's worker
runs them (one asyncio task each): what each sample's end records, and how many objects the hook holds alive per
sample in flight (each one more for every full garbage collection to walk: the per-sample cost must not grow with
the batch, issue 35)."""

from __future__ import annotations

import asyncio
import collections
import gc
from typing import Any

import pytest

from verl_otel import runtime, trackers
from verl_otel import semconv as sc
from verl_otel.hooks import rollout

PARENT = f"00-{'a' * 32}-{'b' * 16}-01"


@pytest.fixture
def tracker(tmp_path, monkeypatch):
    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    runtime.reset_for_tests()
    t = trackers.current().rollout
    t.keep = None  # every finished sample held, to read each one's outcome
    yield t
    runtime.reset_for_tests()


def _trajectory(i: int) -> dict[str, Any]:
    return {"step": 1, "sample_index": i, "rollout_n": 0, "validate": False}


def test_each_sample_records_its_output_or_its_error(tracker):
    batches: list[Any] = []
    tracker.on_batch_done.append(lambda worker, batch: batches.append(batch))

    async def agent_loop(_self: Any, trajectory: dict[str, Any]) -> Any:
        await asyncio.sleep(0)
        i = trajectory["sample_index"]
        if i == 1:
            raise ValueError("tool went away")
        if i == 2:  # v1: the output goes to TransferQueue through _agent_loop_postprocess, the loop returns None
            rollout.tq_postprocess(lambda *a: None, None, (["first", "v1 output"],), {})
            return None
        return f"output {i}"

    async def batch() -> list[Any]:
        tracker.batch_started(sc.MODE_TRAIN, 1, 4, PARENT)
        calls = [rollout.run_agent_loop(agent_loop, None, (None, _trajectory(i)), {}) for i in range(3)]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(batch())
    assert results[0] == "output 0" and isinstance(results[1], ValueError) and results[2] is None
    assert rollout._SAMPLE.get() is None  # no sample's context outlives it
    closed = rollout.run_agent_loop(agent_loop, None, (None, _trajectory(3)), {})
    closed.send(None)  # suspended in the loop, then closed: not a failure of the sample
    closed.close()

    [done] = batches  # the 4th sample's end finished the batch
    by_index = {s.trajectory["sample_index"]: s for s in done.finished}
    assert (by_index[0].output, by_index[0].error) == ("output 0", None)
    assert isinstance(by_index[1].error, ValueError) and done.failed == 1  # recorded, and raised to verl as it was
    assert (by_index[2].output, by_index[2].error) == ("v1 output", None)
    assert by_index[3].error is None and tracker.snapshot(sc.MODE_TRAIN).active == {}


def test_the_hook_holds_few_objects_per_sample_in_flight(tracker):
    """All of a batch's samples suspended at once: the objects the garbage collector tracks, hooked vs the same
    loop unhooked. On main before issue 35 the hook held 16 per sample (two context managers and their bound
    methods, a reset token, an outputs list, the parsed parent context per sample); now 5: its coroutine, the
    sample's context object, the context variable's two nodes and the stall watch's entry."""
    n = 1000

    def census(hooked: bool) -> float:
        counts: dict[str, collections.Counter[str]] = {}

        async def agent_loop(_self: Any, trajectory: dict[str, Any]) -> None:
            started[0] += 1
            if started[0] == n:
                gc.collect()
                counts["peak"] = collections.Counter(type(o).__name__ for o in gc.get_objects())
                everyone.set()
            await everyone.wait()

        async def batch() -> None:
            gc.collect()
            counts["base"] = collections.Counter(type(o).__name__ for o in gc.get_objects())
            if hooked:
                tracker.batch_started(sc.MODE_TRAIN, 1, n, PARENT)
                await asyncio.gather(*[rollout.run_agent_loop(agent_loop, None, (None, t), {}) for t in trajs])
            else:
                await asyncio.gather(*[agent_loop(None, t) for t in trajs])

        everyone, started = asyncio.Event(), [0]
        asyncio.run(batch())
        return sum((counts["peak"] - counts["base"]).values()) / n

    trajs = [_trajectory(i) for i in range(n)]
    census(True)  # warm: the first batch wires the worker
    extra = census(True) - census(False)
    assert extra <= 5.5, extra


def test_the_oldest_sample_in_flight_is_read_without_walking_them(tracker):
    """The oldest-in-flight gauge takes the first sample in flight (they are held in start order)."""
    import time

    tracker.batch_started(sc.MODE_TRAIN, 1, 3, PARENT)
    tokens = []
    for _ in range(3):
        tokens.append(tracker.sample_started(sc.MODE_TRAIN))
        time.sleep(0.05)
    tracker.sample_finished(sc.MODE_TRAIN, tokens[0], {}, None)
    active = tracker.snapshot(sc.MODE_TRAIN).active
    second, third = active[tokens[1]], active[tokens[2]]
    before = time.monotonic()
    readings = {metric.name: value for metric, _, value in tracker.readings()}
    age = readings[sc.ROLLOUT_OLDEST_INFLIGHT.name]
    assert readings[sc.ROLLOUT_SAMPLES_INFLIGHT.name] == 2
    # the second's age: not the finished first's (older), nor the third's (0.05 s younger)
    assert before - third + 0.04 < age <= time.monotonic() - second


def test_a_sample_closed_in_another_samples_context_leaves_that_ones_alone(tracker):
    """A dropped sample coroutine may be closed wherever it is collected, e.g. inside another sample's task: its end
    must not clear that sample's context (its engine requests and reward call carry the step's trace from it)."""
    import contextvars

    async def agent_loop(_self: Any, trajectory: dict[str, Any]) -> None:
        await asyncio.sleep(0)

    tracker.batch_started(sc.MODE_TRAIN, 1, 2, PARENT)
    dropped = rollout.run_agent_loop(agent_loop, None, (None, _trajectory(0)), {})
    contextvars.copy_context().run(dropped.send, None)  # started in a context of its own, suspended
    kept: list[bool] = []

    async def other_loop(_self: Any, trajectory: dict[str, Any]) -> None:
        mine = rollout._SAMPLE.get()
        dropped.close()  # its end runs here, in this sample's context
        kept.append(mine is not None and rollout._SAMPLE.get() is mine)

    asyncio.run(rollout.run_agent_loop(other_loop, None, (None, _trajectory(1)), {}))
    assert kept == [True]
