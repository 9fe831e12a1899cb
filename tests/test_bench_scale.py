"""`make bench-scale` is not part of `make test` (figures, not pass/fail): each of its benchmarks runs here once at a
tiny size (``bench/scale.py --small``), so none can drift from the code it measures unseen. The engine span cap
and the streaming step reader that the figures called for are checked on their own below."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from verl_otel.analysis import slow_steps
from verl_otel.analysis.otlp_json import read_file
from verl_otel.analysis.step_stream import read_steps
from verl_otel.analysis.step_traces import build_steps
from verl_otel.analysis.val_generations import generations, needed
from verl_otel.export.engine_cap import EngineSpanCap

BENCH = Path(__file__).resolve().parent.parent / "bench"
FIGURES = {
    "scale_sample_us_1k",
    "scale_sample_us_10k",
    "scale_sample_us_100k",
    "scale_trace_bytes_per_step_1k",
    "scale_trace_bytes_per_step_100k",
    "scale_series_128w",
    "scale_rss_growth_mb",
    "scale_slow_steps_s_1gb",
    "scale_slow_steps_rss_mb_1gb",
    "scale_val_generations_s_1gb",
    "scale_val_generations_rss_mb_1gb",
    "scale_top_frame_ms_128w",
    "scale_top_frame_ms_128w_1dead",
}


def test_every_scale_benchmark_runs_on_the_current_code():
    out = subprocess.run(
        [sys.executable, str(BENCH / "scale.py"), "--small"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    figures = {}
    for line in out.stdout.splitlines():
        if line.startswith("scale_"):
            name, value = line.split()
            figures[name] = float(value)
    assert set(figures) == FIGURES
    bad = {k: v for k, v in figures.items() if not (math.isfinite(v) and v >= 0)}
    assert not bad, bad


class _Inner:
    def __init__(self) -> None:
        self.ended: list[object] = []

    def on_start(self, span: object, parent_context: object = None) -> None:
        pass

    def on_end(self, span: object) -> None:
        self.ended.append(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def _span(trace_id: int, duration: int) -> SimpleNamespace:
    return SimpleNamespace(context=SimpleNamespace(trace_id=trace_id), start_time=1000, end_time=1000 + duration)


def test_engine_spans_per_trace_are_bounded_and_the_slowest_kept():
    inner = _Inner()
    cap = EngineSpanCap(inner, keep=4, idle_s=3600)  # type: ignore[arg-type]
    for d in range(3):  # a small trace: every request passes at once
        cap.on_end(_span(1, d))
    assert len(inner.ended) == 3
    for d in range(1000):  # a big one: 4 at once, the 4 slowest of the rest when it goes idle
        cap.on_end(_span(2, d))
    assert len(inner.ended) == 7
    assert cap.release() == 0  # not idle yet
    cap.force_flush()
    assert len(inner.ended) == 7
    cap.shutdown()
    durations = sorted(s.end_time - s.start_time for s in inner.ended[7:])
    assert durations == [996, 997, 998, 999]
    assert cap.skipped == 1000 - 8 and cap._traces == {}


def test_the_streaming_readers_read_what_reading_every_span_reads(tmp_path):
    sys.path.insert(0, str(BENCH))
    import scale_readers

    scale_readers.write_run(tmp_path, steps=12, workers=6, samples=4, replicas=2)
    path = tmp_path / "traces.jsonl"
    every = read_file(path).spans
    streamed, got = read_steps(path, 0, slow_steps.SAMPLES_SHOWN)
    expected = slow_steps.to_json(slow_steps.rank(build_steps(every), 20), None)
    assert slow_steps.to_json(slow_steps.rank(streamed, 20), None) == expected
    assert expected[0]["slowest_samples"][0]["engine"] is not None and got.spans == []
    kept = read_file(path, keep=needed).spans
    assert len(kept) < len(every) / 10
    assert generations(kept) == generations(every) and len(generations(kept)) == 64


def test_a_worker_holds_only_the_slowest_samples_of_its_batch():
    import time

    from verl_otel.telemetry.rollout import RolloutTracker

    tracker, got = RolloutTracker(), []
    tracker.keep = 3
    tracker.on_batch_done.append(lambda worker, batch: got.append(batch))
    tracker.batch_started("train", 1, 100, None)
    for i in range(100):
        token = tracker.sample_started("train")
        tracker.snapshot("train").active[token] = time.monotonic() - i * 7 % 100  # each its own duration
        tracker.sample_finished("train", token, {"sample_index": i}, None, ValueError() if i == 5 else None)
        assert len(tracker.snapshot("train").finished) <= 3
    [batch] = got
    assert batch.handed == 100 and batch.failed == 1 and batch.completed == 100
    assert sorted(s.trajectory["sample_index"] for s in batch.finished) == [14, 57, 71]  # 98, 99 and 97 s
