"""The per-process runtime keeps its promises: no training thread waits on export I/O, one flusher
thread whatever the collector does, fit end bounded by VERL_OTEL_SHUTDOWN_TIMEOUT, settings the SDK
rejects degrade with a line naming them, and an enabled process that never imports verl loads almost
nothing of ours. Each process here is a real one driven through verl's own timer and Tracking.log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers.bad_collectors import BadCollector
from helpers.procs import clean_env, run_py
from helpers.traces import load_spans

from verl_otel import semconv as sc

DRIVE = str(Path(__file__).parent / "drive_hooks.py")


def _stats(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0 and "DRIVE_DONE" in proc.stdout, (proc.stdout[-2000:], proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("DRIVE_STATS "))
    return json.loads(line.split(" ", 1)[1])


@pytest.mark.parametrize("mode", ["blackhole", "reset", "garbage"])
def test_broken_collector_one_thread_and_bounded_fit_end(tmp_path, mode):
    """30 fast steps against a collector that never answers, resets, or answers garbage: one flusher
    thread, one stall watch (its own thread: a flusher stuck on this collector must not stop stall detection),
    the end watch (it writes the open step when a signal ends the process) and one span sender at most (never
    one per flush or per batch), a step end that only enqueues, a fit end within VERL_OTEL_SHUTDOWN_TIMEOUT, and
    the spans that could not be sent wait in unsent/."""
    with BadCollector(mode) as bad:
        t0 = time.monotonic()
        proc = run_py(
            [DRIVE, "30"],
            clean_env(
                OTEL_EXPORTER_OTLP_ENDPOINT=bad.endpoint,
                OTEL_METRIC_EXPORT_INTERVAL="200",
                VERL_OTEL_SHUTDOWN_TIMEOUT="2",
                VERL_OTEL_DIR=str(tmp_path / "data"),
            ),
            tmp_path,
        )
        wall = time.monotonic() - t0
    stats = _stats(proc)
    # verl-otel-flusher, verl-otel-stall-watch, verl-otel-end-watch, verl-otel-span-sender
    assert stats["most_threads"] <= 4, stats
    assert stats["step_end_s"] < 0.5, stats
    assert list((tmp_path / "data" / sc.UNSENT_DIR).glob("*.jsonl")), "the unsent spans wait on disk"
    # 2 s of budget and 1 s for the last writes on a loaded machine; without a deadline it would be the exporter's 10 s
    assert stats["fit_end_s"] <= 2.0 + 1.0, stats
    assert wall < 60, wall  # the process exits too: no exit hook waits on the collector without a deadline


def test_unresponsive_trace_directory_never_blocks_training(tmp_path):
    """traces.jsonl is a FIFO nobody reads (a mount that stopped answering): the run goes on, the
    spans are dropped and counted, and the step's /metrics-side state is intact."""
    data = tmp_path / "data"
    data.mkdir()
    os.mkfifo(data / "traces.jsonl")
    proc = run_py(
        [DRIVE, "5"],
        clean_env(VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(data), VERL_OTEL_SHUTDOWN_TIMEOUT="2"),
        tmp_path,
        timeout=60,
    )
    stats = _stats(proc)
    assert stats["fit_end_s"] <= 2.2 and stats["step_end_s"] < 0.5, stats
    # refused at once: a FIFO is opened non-blocking (no reader: ENXIO; a reader: not a regular file)
    assert proc.stderr.count("cannot write traces") == 1, proc.stderr[-2000:]


def test_settings_the_sdk_rejects_degrade_with_one_line_each(tmp_path):
    """The crash reported by users: batch size above the queue size made the SDK raise inside verl's
    worker. Now each bad value gets one line naming it, and spans still reach the file."""
    env = clean_env(
        VERL_OTEL_ENABLED="1",
        VERL_OTEL_DIR=str(tmp_path / "data"),
        OTEL_BSP_MAX_QUEUE_SIZE="64",
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE="512",
        OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT="lots",
        OTEL_TRACES_SAMPLER="sometimes",
        OTEL_EXPORTER_OTLP_COMPRESSION="zstd",
        VERL_OTEL_SAMPLE_SPANS="inf",
        VERL_OTEL_MAX_TEXT="1e999",
        VERL_PROGRESS_LOG_INTERVAL="nan",
    )
    proc = run_py([DRIVE, "2"], env, tmp_path)
    _stats(proc)
    for name in (
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
        "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
        "OTEL_TRACES_SAMPLER",
        "VERL_OTEL_SAMPLE_SPANS",
        "VERL_OTEL_MAX_TEXT",
    ):
        lines = [x for x in proc.stderr.splitlines() if name in x]
        assert len(lines) == 1, (name, lines)
    steps = {
        s.attributes.get("verl.global_step") for s in load_spans(tmp_path / "data" / "traces.jsonl") if s.name == "step"
    }
    assert steps == {1, 2}


def test_exception_text_is_cut_to_max_text(tmp_path):
    """A 200 KB exception message: the span's event and status carry at most VERL_OTEL_MAX_TEXT characters."""
    env = clean_env(
        VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp_path / "data"), VERL_OTEL_MAX_TEXT="300", DRIVE_BIG_ERROR="1"
    )
    proc = run_py([DRIVE, "1", "update_actor"], env, tmp_path)
    _stats(proc)
    raw = (tmp_path / "data" / "traces.jsonl").read_text()
    assert "x" * 301 not in raw and "x" * 200 in raw


def _modules_after_start(env: dict[str, str]) -> set[str]:
    code = "import sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout))


def test_an_enabled_process_without_verl_loads_almost_nothing(tmp_path):
    off = _modules_after_start(clean_env())
    on = _modules_after_start(clean_env(VERL_OTEL_ENABLED="1", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9"))
    extra = on - off
    assert "verl_otel.hooks.targets" in extra, "the start-up hook ran"
    assert not any(
        m.startswith(
            ("opentelemetry", "google.protobuf", "grpc", "wrapt", "asyncio", "verl_otel.telemetry", "verl_otel.export")
        )
        for m in extra
    ), sorted(extra)
    ours = sorted(m for m in extra if m.startswith("verl_otel"))
    assert len(ours) <= 8, ours  # the package, _env, _autoload, _log, hooks, its registry, import_hooks, targets


@pytest.mark.parametrize("value,active", [("1", True), ("maybe", False), ("0", False), ("", False)])
def test_start_up_line_and_config_agree(value, active):
    """The .pth line and config share one parser: a value it cannot read never switches telemetry on."""
    from verl_otel import config

    env = clean_env(VERL_OTEL_ENABLED=value)
    assert config.enabled(env) is active
    assert ("verl_otel.hooks.targets" in _modules_after_start(env)) is active


def test_flusher_coalesces_requests_on_a_hung_export():
    from verl_otel.export.flusher import Flusher

    release = threading.Event()
    calls = []

    def hung_flush() -> None:
        calls.append(1)
        release.wait(10)

    flusher = Flusher(hung_flush, tick_s=0.05)
    before = threading.active_count()
    tickets = [flusher.request() for _ in range(200)]
    t0 = time.monotonic()
    assert flusher.wait(tickets[-1], 0.3) is False, "the wait gives up at its deadline"
    assert 0.25 < time.monotonic() - t0 < 1.0
    assert threading.active_count() - before == 1 and flusher.threads_started == 1
    release.set()
    assert flusher.wait(flusher.request(), 5.0)
    assert len(calls) <= 3, "requests made during a flush are coalesced"


def test_given_providers_are_honoured(tmp_path):
    """instrument(tracer_provider=..., meter_provider=...) as the contrib instrumentors do: spans and metrics
    go there, no trace file is written."""
    code = f"""
import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
import verl_otel
mem = InMemorySpanExporter(); tp = TracerProvider(); tp.add_span_processor(SimpleSpanProcessor(mem))
reader = InMemoryMetricReader(); mp = MeterProvider(metric_readers=[reader])
verl_otel.instrument(tracer_provider=tp, meter_provider=mp)
sys.argv = ["drive_hooks.py", "1"]
import runpy; runpy.run_path({DRIVE!r}, run_name="__main__")
print("NAMES", sorted({{s.name for s in mem.get_finished_spans()}}))
data = reader.get_metrics_data()
print("METRICS", sorted({{m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}}))
scopes = {{(s.instrumentation_scope.name, s.instrumentation_scope.version) for s in mem.get_finished_spans()}}
scopes |= {{(sm.scope.name, sm.scope.version) for rm in data.resource_metrics for sm in rm.scope_metrics}}
print("SCOPES", sorted(scopes))
"""
    proc = run_py(["-c", code], clean_env(VERL_OTEL_DIR=str(tmp_path / "data")), tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = next(x for x in proc.stdout.splitlines() if x.startswith("NAMES"))
    assert "'step'" in names and "'update_actor'" in names, names
    metrics = next(x for x in proc.stdout.splitlines() if x.startswith("METRICS"))
    from verl_otel import semconv as sc

    assert sc.TRAINING_STEP.otel_name in metrics and sc.STEP_DURATION.otel_name in metrics, metrics
    # tracers and meters named with the package's version, as the contrib instrumentations do
    scopes = next(x for x in proc.stdout.splitlines() if x.startswith("SCOPES"))
    assert scopes == f"SCOPES {[(sc.INSTRUMENTATION_NAME, sc.INSTRUMENTATION_VERSION)]}", scopes
    assert not (tmp_path / "data" / "traces.jsonl").exists()


def test_a_process_takes_its_metrics_endpoint_out_of_file_sd_at_exit(tmp_path):
    code = """
from verl_otel import runtime
rt = runtime.current()
rt.wire("agent_loop_worker")
import json, pathlib, time
p = pathlib.Path(rt.settings.data_dir) / "prometheus_targets.json"
deadline = time.monotonic() + 10
while not p.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
print("LISTED", len(json.loads(p.read_text())))
"""
    data = tmp_path / "data"
    proc = run_py(["-c", code], clean_env(VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(data)), tmp_path)
    assert proc.returncode == 0 and "LISTED 1" in proc.stdout, (proc.stdout, proc.stderr[-2000:])
    assert json.loads((data / "prometheus_targets.json").read_text()) == []
