"""`make bench-scale` is not part of `make test` (figures, not pass/fail): each of its benchmarks runs here once at a
tiny size (``bench/scale.py --small``), so none can drift from the code it measures unseen. The engine span cap
and the streaming step reader that the figures called for are checked on their own below."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from verl_otel.analysis import slow_steps
from verl_otel.analysis.otlp_json import read_file
from verl_otel.analysis.step_stream import read_steps
from verl_otel.analysis.step_traces import build_steps
from verl_otel.analysis.val_generation_reader import generations, needed
from verl_otel.export.engine_cap import EngineSpanCap

BENCH = Path(__file__).resolve().parent.parent / "bench"
FIGURES = {
    "scale_sample_us_1k",
    "scale_sample_us_10k",
    "scale_sample_us_100k",
    "scale_inflight_sample_us_1k",
    "scale_inflight_sample_us_10k",
    "scale_inflight_sample_us_100k",
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
    "scale_rollouter_sample_us_10k",
    "scale_rollouter_rss_growth_mb",
    "scale_sd_first_refresh_ms_256p",
    "scale_sd_refresh_ms_256p",
    "scale_sd_answer_kb_256p",
    "scale_gather_s_32n",
    "scale_gather_mb_32n",
}
JAEGER_FIGURES = {"scale_jaeger_steps_1000_s", "scale_jaeger_rss_mb", "scale_jaeger_max_page_kb"}


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
    sys.path.insert(0, str(BENCH))
    import scale_jaeger

    # without a Jaeger binary the figure says so and is left out (`make stack-bin` builds one)
    has_jaeger = scale_jaeger.jaeger_binary() is not None
    assert set(figures) == FIGURES | (JAEGER_FIGURES if has_jaeger else set())
    assert has_jaeger or "scale_jaeger_*: skipped, no jaeger binary" in out.stdout
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


def _drive(coro: object) -> None:
    try:
        coro.send(None)  # type: ignore[attr-defined]
    except StopIteration:
        return
    raise AssertionError("suspended")


def test_the_rollouter_reads_only_the_samples_that_get_a_span(tmp_path, monkeypatch):
    """bench/scale.py's rollouter figure: reading each sample's batch was most of our cost per sample; only a
    sample among its window's slowest so far (those that can get a span) is read now."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from verl_otel import runtime, trackers
    from verl_otel import semconv as sc
    from verl_otel.hooks import async_rollout
    from verl_otel.telemetry.rollouter import RollouterCounters

    mem, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(mem))
    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    runtime.reset_for_tests()
    runtime.configure(tracer_provider=provider)
    windows = trackers.current().windows  # this test's runtime's (gone with its reset)
    now = [10**18]
    monkeypatch.setattr(async_rollout, "time", SimpleNamespace(time_ns=lambda: now[0]))
    reads: list[int] = []

    class Sample:  # verl's RolloutSample: its id is read only with its batch
        def __init__(self, i: int) -> None:
            self.i = i

        @property
        def sample_id(self) -> str:
            reads.append(self.i)
            return f"s{self.i}"

    durations = [(i * 7919) % 1000 + 1 for i in range(1000)]  # ms, each its own, in no order

    async def generate(sample: Sample) -> None:
        now[0] += durations[sample.i] * 10**6

    try:
        windows.fit_started(lambda: RollouterCounters())
        for i in range(1000):
            _drive(async_rollout.process_sample(generate, None, (Sample(i),), {}))
        windows.fit_ended(None)
    finally:
        runtime.reset_for_tests()
    keep = windows.sample_spans.max_spans if windows.sample_spans else 0
    samples = [s for s in mem.get_finished_spans() if s.name == sc.SPAN_ROLLOUT_SAMPLE]
    slowest = sorted(range(1000), key=lambda i: -durations[i])[:keep]
    assert keep and sorted(str(s.attributes[sc.ATTR_SAMPLE_ID]) for s in samples) == sorted(f"s{i}" for i in slowest)
    assert keep <= len(reads) < 100, len(reads)  # every one of the 1,000 before
    (window,) = [s for s in mem.get_finished_spans() if s.name == sc.SPAN_ROLLOUTER_GENERATE]
    assert all(s.parent is not None and s.parent.span_id == window.context.span_id for s in samples)


def test_slow_steps_pages_through_the_real_jaeger_and_reads_what_one_answer_reads():
    """The small version of the Jaeger figure: 20 step traces of the figure's shape in the real Jaeger, read in
    pages of at most 3 traces (every answer at most 3 traces' worth), rank as one answer of all 20 ranks."""
    from helpers.real_stack import go_binaries

    from verl_otel import semconv as sc
    from verl_otel.analysis import jaeger_pages
    from verl_otel.analysis.jaeger import JaegerClient

    sys.path.insert(0, str(BENCH))
    import scale_jaeger

    jaeger = scale_jaeger.MemoryJaeger(go_binaries()["jaeger"])
    try:
        scale_jaeger.load_run(jaeger, 20, workers=6, samples=4, replicas=2)
        client, now = JaegerClient(jaeger.url), time.time_ns()
        since = now - 2 * 86400 * 10**9
        every = client.find_steps("verl", since, now, limit=1000)
        whole, one = client.last_bytes, 0
        for trace_id in {s.trace_id for s in every}:
            client.get_trace(trace_id)
            one = max(one, client.last_bytes)
        pages = jaeger_pages.Pages()
        paged = jaeger_pages.steps(
            client, "verl", since, now, [sc.SPAN_STEP], slow_steps.SAMPLES_SHOWN, pages, page_traces=3
        )
    finally:
        jaeger.stop()
    assert pages.traces == 20 and pages.answers >= 7 and pages.crowded == 0
    assert 0 < pages.largest_bytes <= 3 * one < whole / 2  # 3 of 20 traces, the largest (validations) among them
    expected = slow_steps.to_json(slow_steps.rank(build_steps(every), 20), None)
    assert slow_steps.to_json(slow_steps.rank(paged, 20), None) == expected and len(expected) == 20
    assert expected[0]["slowest_samples"][0]["engine"] is not None
