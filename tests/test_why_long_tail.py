"""The rollout's long tail (issue 28, part 2): each rollout.worker says its batch's median and slowest sample and
their ratio (and sets the gauge), slow-steps names the sample the rollout waited for."""

import pytest

from verl_otel import runtime, trackers
from verl_otel import semconv as sc
from verl_otel.analysis import long_tail, slow_steps
from verl_otel.analysis.step_traces import Span, build_step
from verl_otel.telemetry.rollout_spans import tail_attributes

S = 10**9
T = "e" * 32


def test_worker_tail_attributes():
    got = tail_attributes([8.0, 0.5, 0.4, 0.4, 0.3])
    assert got == {
        sc.ATTR_WORKER_SAMPLE_MEDIAN_S: 0.4,
        sc.ATTR_WORKER_SAMPLE_MAX_S: 8.0,
        sc.ATTR_WORKER_TAIL_RATIO: pytest.approx(20.0),
    }
    assert tail_attributes([]) == {} and sc.ATTR_WORKER_TAIL_RATIO not in tail_attributes([0.0, 0.0])


def _step(slow_s: float, mode: str = sc.MODE_TRAIN) -> list[Span]:
    """A 9 s rollout of two workers (medians 0.4 s and 0.5 s); worker 1's sample #17 takes ``slow_s``."""
    root = Span(T, "0" * 16, "", sc.SPAN_STEP, 0, 12 * S, {sc.ATTR_GLOBAL_STEP: 3})
    roll = Span(T, "1" * 16, root.span_id, sc.PHASE_ROLLOUT, 0, 9 * S, {sc.ATTR_PHASE: sc.PHASE_ROLLOUT})
    spans = [root, roll]
    for w, median in ((0, 0.4), (1, 0.5)):
        wid = f"{w + 2:016x}"
        attrs = {sc.ATTR_WORKER_INDEX: w, sc.ATTR_MODE: mode, sc.ATTR_WORKER_SAMPLE_MEDIAN_S: median}
        spans.append(Span(T, wid, roll.span_id, sc.SPAN_ROLLOUT_WORKER, 0, 9 * S, attrs))
        for k, secs in enumerate((0.6, 0.9) if w == 0 else (0.7, slow_s)):
            idx = 17 if (w, k) == (1, 1) else 10 * w + k
            spans.append(
                Span(
                    T,
                    f"{10 * w + k + 10:016x}",
                    wid,
                    sc.SPAN_ROLLOUT_SAMPLE,
                    0,
                    int(secs * S),
                    {sc.ATTR_SAMPLE_INDEX: idx},
                )
            )
    return spans


def test_a_long_tail_is_named_with_the_share_the_rollout_waited():
    step = build_step(_step(8.1))
    t = long_tail.tail(step)
    assert t is not None and t.is_long and t.sample.index == 17 and t.sample.worker == 1
    assert t.median_s == pytest.approx(0.45) and t.ratio == pytest.approx(18.0)
    assert t.text() == (
        "long tail: sample #17 took 8.1 s of the 9.0 s rollout, median sample 0.5 s, "
        "80% of the rollout waited for 1 sample"  # 8.1 - 0.9 (the next to end) of 9 s
    )
    ranking = slow_steps.rank([step], 1)
    assert "   " + t.text() in slow_steps.to_text(ranking, None).splitlines()
    js = slow_steps.to_json(ranking, None)[0]["rollout_tail"]
    assert js["sample_index"] == 17 and js["tail_ratio"] == 18.0 and js["waited_share"] == 0.8 and js["long_tail"]


def test_no_long_tail_when_samples_are_alike_or_only_validation():
    step = build_step(_step(1.0))
    t = long_tail.tail(step)
    assert t is not None and not t.is_long  # 2.2x the median: no tail to speak of
    assert "long tail" not in slow_steps.to_text(slow_steps.rank([step], 1), None)
    assert long_tail.tail(build_step(_step(8.1, sc.MODE_VALIDATE))) is None  # validation samples: not the rollout


def test_the_gauge_is_set_for_a_training_batch(monkeypatch):
    from verl_otel.telemetry import rollout_spans
    from verl_otel.telemetry.rollout import Batch

    runtime.reset_for_tests()
    monkeypatch.setattr(rollout_spans, "emit_group", lambda *a, **k: None)  # the spans: tests/test_e2e_*
    store = runtime.current().store
    for mode, worker in ((sc.MODE_TRAIN, 3), (sc.MODE_VALIDATE, 4)):
        batch = Batch(mode, 2, 4)
        batch.finished = [_Done(x) for x in (4.0, 1.0, 1.0, 0.5)]
        rollout_spans.emit_batch(trackers.current().services, worker, batch, 2)
    got = {labels: v for m, labels, v in store.readings() if m is sc.ROLLOUT_TAIL_RATIO}
    assert got == {("3",): pytest.approx(4.0)}
    runtime.reset_for_tests()


class _Done:
    def __init__(self, seconds: float) -> None:
        self.seconds, self.start_ns, self.end_ns = seconds, 0, int(seconds * S)
        self.trajectory, self.output, self.error = None, None, None


def test_the_median_is_of_every_sample_while_a_worker_holds_only_the_slowest():
    """With the worker's ``keep`` (scale: only the K slowest samples held), the batch's median is still that of
    every sample, and the durations kept for it stay bounded past DURATIONS_KEPT."""
    import statistics
    import time

    from verl_otel.telemetry import rollout

    tracker, got = rollout.RolloutTracker(), []
    tracker.keep = 2
    tracker.on_batch_done.append(lambda worker, batch: got.append(batch))
    tracker.batch_started(sc.MODE_TRAIN, 1, 9, None)
    for i in range(9):
        token = tracker.sample_started(sc.MODE_TRAIN)
        tracker.snapshot(sc.MODE_TRAIN).active[token] = time.monotonic() - (i + 1)  # 1 .. 9 s
        tracker.sample_finished(sc.MODE_TRAIN, token, {}, None)
    [batch] = got
    assert len(batch.finished) == 2 and sorted(batch.durations) == pytest.approx(list(range(1, 10)), abs=0.05)
    seconds = batch.durations or [s.seconds for s in batch.finished]
    tail = tail_attributes(seconds, max(s.seconds for s in batch.finished))
    assert tail[sc.ATTR_WORKER_SAMPLE_MEDIAN_S] == pytest.approx(5.0, abs=0.05)  # not the median of the 2 held
    assert tail[sc.ATTR_WORKER_SAMPLE_MAX_S] == pytest.approx(9.0, abs=0.05)

    n = rollout.DURATIONS_KEPT + 500
    tracker.batch_started(sc.MODE_TRAIN, 2, n, None)
    for _ in range(n):
        tracker.sample_finished(sc.MODE_TRAIN, tracker.sample_started(sc.MODE_TRAIN), {}, None)
    assert len(got[-1].durations) == rollout.DURATIONS_KEPT and got[-1].handed == n
    assert statistics.median(got[-1].durations) < 0.05


def test_the_durations_kept_past_the_bound_are_a_uniform_sample(monkeypatch):
    """Past DURATIONS_KEPT the batch keeps a uniform sample of its samples' seconds, drawn by skips (a draw per kept
    sample, not per sample): each sample, early or late, is kept with the same chance, KEPT / N."""
    import time

    from verl_otel.telemetry import rollout

    kept, n, trials = 8, 40, 2000
    monkeypatch.setattr(rollout, "DURATIONS_KEPT", kept)
    tracker, got = rollout.RolloutTracker(), []
    tracker.keep = 1
    tracker.on_batch_done.append(lambda worker, batch: got.append(batch))
    counts = [0] * n
    for trial in range(trials):
        tracker.batch_started(sc.MODE_TRAIN, trial, n, None)
        for i in range(n):
            token = tracker.sample_started(sc.MODE_TRAIN)
            tracker.snapshot(sc.MODE_TRAIN).active[token] = time.monotonic() - (i + 1)  # sample i: i + 1 s
            tracker.sample_finished(sc.MODE_TRAIN, token, {}, None)
        assert len(got[-1].durations) == kept and got[-1].handed == n
        for seconds in got[-1].durations:
            counts[round(seconds) - 1] += 1
    shares = [c / trials for c in counts]
    assert all(abs(s - kept / n) < 0.05 for s in shares), shares  # 0.2 each; its standard error ~0.009
    assert abs(sum(shares[: n // 2]) - sum(shares[n // 2 :])) < 0.2  # no drift from the first half to the last


def _tool_step() -> list[Span]:
    """As _step, with worker 1's sample #17 an agent loop that spent 7.9 s of its 8.4 s in 3 calls of tool search."""
    spans = _step(8.4)
    slow = next(s for s in spans if s.attributes.get(sc.ATTR_SAMPLE_INDEX) == 17)
    slow.attributes.update(
        {
            sc.ATTR_SAMPLE_TOOLS_S: 7.95,
            sc.ATTR_SAMPLE_SLOWEST_TOOL: "search",
            sc.ATTR_SAMPLE_SLOWEST_TOOL_S: 6.1,
            sc.ATTR_SAMPLE_SLOWEST_TOOL_CALLS: 3,
            sc.ATTR_SAMPLE_SLOWEST_TOOL_TOTAL_S: 7.9,
        }
    )
    turn = Span(T, "a" * 16, slow.span_id, sc.SPAN_TURN, 0, 8 * S, {sc.ATTR_TURN_INDEX: 1})
    calls = [("search", 6.1, sc.TOOL_OK), ("search", 1.0, sc.TOOL_RAISED), ("search", 0.8, sc.TOOL_OK)]
    calls.append(("run_python", 0.05, sc.TOOL_OK))
    tools = [
        Span(
            T,
            f"{0xB0 + i:016x}",
            turn.span_id,
            f"execute_tool {tool}",
            0,
            int(secs * S),
            {sc.ATTR_GENAI_TOOL_NAME: tool, sc.ATTR_TOOL_OUTCOME: outcome},
        )
        for i, (tool, secs, outcome) in enumerate(calls)
    ]
    return [*spans, turn, *tools]


def test_a_long_tail_held_up_by_a_tool_names_the_tool():
    step = build_step(_tool_step())
    t = long_tail.tail(step)
    assert t is not None and t.is_long
    assert t.text().startswith("long tail: sample #17 spent 7.9 s of 8.4 s in 3 calls of tool search, slowest 6.1 s")
    assert sc.SPAN_TURN not in step.phases and not any(p.startswith("execute_tool") for p in step.phases)
    ranking = slow_steps.rank([step], 1)
    text = slow_steps.to_text(ranking, None, tools=True)
    assert "   tool search: 3 calls, 1 failed (33%), p50 1.00 s, slowest 6.10 s, 7.9 s in all" in text.splitlines()
    assert "tool run_python: 1 calls" in text and "tool search:" not in slow_steps.to_text(ranking, None)
    js = slow_steps.to_json(ranking, None)[0]
    assert js["rollout_tail"]["slowest_tool"]["tool"] == "search" and js["tools"][0]["failures"] == 1
