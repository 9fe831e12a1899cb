"""What a collector that is down until after the run costs: fit end stays within VERL_OTEL_SHUTDOWN_TIMEOUT,
the spans wait in ``$VERL_OTEL_DIR/unsent/`` as OTLP/JSON (``slow-steps --file`` reads them), the last line says
how many, and ``verl-otel push`` delivers them to a real receiver later. And metrics keep their meaning across
an outage: the OTLP push's cumulative counters carry the whole total after it, /metrics never noticed."""

from __future__ import annotations

import logging
import time
import urllib.request

import grpc

from helpers.otlp_receiver import OtlpReceiver, Received, free_port
from helpers.step_spans import N_STEPS, sdk_run

from verl_otel import config
from verl_otel import semconv as sc
from verl_otel.analysis.otlp_json import read_file
from verl_otel.cli.main import main
from verl_otel.export import otel_metrics, prometheus
from verl_otel.export.otlp_send import make_sender
from verl_otel.export.span_buffer import BufferedSpanExporter, unsent_path
from verl_otel.process.metrics import MetricStore
from verl_otel.runtime import Runtime


def _settings(tmp_path, endpoint: str, **extra: str) -> config.Settings:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, sc.ENV_DIR: str(tmp_path), **extra}
    return config.load(env, report=False)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_down_until_after_the_run_then_push_delivers(tmp_path, monkeypatch, capsys):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nobody there for the whole run
    settings = _settings(tmp_path, endpoint, **{sc.ENV_SHUTDOWN_TIMEOUT: "1"})
    rt = Runtime(settings)
    lines = _Lines()
    logging.getLogger("verl_otel").addHandler(lines)
    try:
        tracer = rt.tracer
        for n in range(6):
            with (
                tracer.start_as_current_span("step", attributes={"verl.global_step": n}),
                tracer.start_as_current_span("phase"),
            ):
                pass
        t0 = time.monotonic()
        rt.finish()
        assert time.monotonic() - t0 < settings.shutdown_timeout_s + 3.0  # the budget, whatever the endpoint
    finally:
        logging.getLogger("verl_otel").removeHandler(lines)
        for buffer in rt.unsent.buffers:
            buffer.shutdown()
    unsent = list((tmp_path / sc.UNSENT_DIR).glob("*.jsonl"))
    assert len(unsent) == 1
    assert len(read_file(unsent[0]).spans) == 12
    assert any("12 spans" in line and "verl-otel push" in line for line in lines.lines[-1:]), lines.lines
    dropped = [v for m, labels, v in rt.store.readings() if m == sc.OTEL_DROPPED and v]
    assert dropped == []  # waiting on disk is not dropped
    from verl_otel.demo.runner import _say_unsent

    _say_unsent(tmp_path)  # the demo's last line
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.endswith(f"12 spans wait in {tmp_path / sc.UNSENT_DIR} (verl-otel push --dir {tmp_path})"), last
    with OtlpReceiver() as rx:
        assert main(["push", "--dir", str(tmp_path), "--endpoint", rx.grpc_endpoint]) == 0
        assert "sent 12 spans" in capsys.readouterr().out
        assert len(rx.received.spans) == 12
        assert {s.attributes["verl.global_step"] for s in rx.received.spans if s.name == "step"} == set(range(6))
    assert not list((tmp_path / sc.UNSENT_DIR).glob("*.jsonl"))  # delivered: deleted
    assert main(["push", "--dir", str(tmp_path)]) == 0
    assert "nothing waits" in capsys.readouterr().out


def test_unsent_files_are_read_by_slow_steps_and_pushed_over_http(tmp_path, capsys):
    """The SDK's own step spans, spilled as a run would at exit; slow-steps reads the file, push (OTLP/HTTP,
    the endpoint refusing at first) stops with the rest kept, and delivers it all on the second go."""
    spans = sdk_run(time.time_ns() - 600 * 10**9)
    path = unsent_path(tmp_path)
    sender = make_sender(f"http://127.0.0.1:{free_port()}", "grpc", 1.0, False)
    buffer = BufferedSpanExporter(sender, 2**20, path, lambda reason, n: None)
    for i in range(0, len(spans), 7):
        buffer.export(spans[i : i + 7])
    assert buffer.spill() == len(spans)
    buffer.shutdown()
    assert main(["slow-steps", "--file", str(path), "--json"]) == 0
    assert '"global_step"' in capsys.readouterr().out
    with OtlpReceiver() as rx:
        rx.http_status = 503
        assert (
            main(
                [
                    "push",
                    "--dir",
                    str(tmp_path),
                    "--endpoint",
                    rx.http_endpoint,
                    "--protocol",
                    "http/protobuf",
                    "--wait",
                    "1",
                ]
            )
            == 1
        )
        assert "run push again" in capsys.readouterr().err
        assert path.exists() and rx.refused >= 1
        rx.http_status = None
        assert (
            main(["push", "--dir", str(tmp_path), "--endpoint", rx.http_endpoint, "--protocol", "http/protobuf"]) == 0
        )
        assert len(rx.received.spans) == len(spans)
        steps = {s.attributes.get("verl.global_step") for s in rx.received.spans if s.name == sc.SPAN_STEP}
        assert len(steps) == N_STEPS + 1
    assert not path.exists()


def _dropped(received: Received, reason: str) -> list[float]:
    """The pushed points of verl_otel_dropped_total{reason}; call under received.lock (wait_for holds it)."""
    return [
        v
        for name, labels, v in received.metric_points
        if name == sc.OTEL_DROPPED.otel_name and labels.get(sc.LABEL_REASON) == reason
    ]


def test_metrics_keep_their_cumulative_meaning_across_an_outage(tmp_path, monkeypatch):
    rx = OtlpReceiver().start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.grpc_endpoint)
    settings = _settings(tmp_path, rx.grpc_endpoint, OTEL_METRIC_EXPORT_INTERVAL="300")
    store = MetricStore()
    provider = otel_metrics.start_push(store, settings, None)
    port = prometheus.serve(store, "127.0.0.1", 0)
    try:
        store.drop("test_reason", 5)
        assert rx.wait_for(lambda r: 5.0 in _dropped(r, "test_reason"), timeout=30)
        rx.refuse = grpc.StatusCode.UNAVAILABLE
        refused_before = rx.refused
        store.drop("test_reason", 7)
        assert rx.wait_for(lambda r: rx.refused >= refused_before + 2, timeout=30)
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'verl_otel_dropped_total{reason="test_reason"} 12.0' in page  # the pull path: unaffected
        with rx.received.lock:
            assert 12.0 not in _dropped(rx.received, "test_reason")
        rx.refuse = None
        # the first point after the outage carries the whole total, not the 7 of the outage
        assert rx.wait_for(lambda r: 12.0 in _dropped(r, "test_reason"), timeout=30)
        with rx.received.lock:
            assert all(v in (5.0, 12.0) for v in _dropped(rx.received, "test_reason"))
    finally:
        provider.shutdown(timeout_millis=2000)
        rx.stop()
