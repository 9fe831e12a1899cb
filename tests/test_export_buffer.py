"""OTLP span push through a collector outage (export/span_buffer.py, export/otlp_send.py), with real SDK spans
and a real OTLP receiver (gRPC TraceService and OTLP/HTTP) on 127.0.0.1: a batch the collector cannot take now
waits and is sent when it answers again, oldest first; a permanent refusal is counted, not retried forever; a
full buffer drops the oldest, counted. Nothing here waits on a bare sleep: every wait polls with a deadline."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import grpc
import pytest

from helpers.bad_collectors import BadCollector
from helpers.otlp_receiver import OtlpReceiver, free_port

from verl_otel import config
from verl_otel import semconv as sc
from verl_otel.export import providers
from verl_otel.export.span_buffer import BufferedSpanExporter


class Run:
    """A tracer provider of ours pushing to ``endpoint``, its buffer and what it counted as dropped."""

    def __init__(self, tmp: Path, endpoint: str, protocol: str = "grpc", buffer_mb: str = "64") -> None:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            sc.ENV_DIR: str(tmp),
            sc.ENV_EXPORT_BUFFER_MB: buffer_mb,
        }
        self.settings = config.load(env, report=False)
        self.drops: Counter[str] = Counter()
        buffers: list[BufferedSpanExporter] = []
        res = providers.resource("trainer", None, {})
        self.provider, self.destination = providers.tracer_provider(
            self.settings, res, lambda reason, n: self.drops.update({reason: n}), on_buffer=buffers.append
        )
        assert len(buffers) == 1, self.destination
        self.buffer = buffers[0]
        self.tracer = self.provider.get_tracer("test")

    def step(self, n: int, children: int = 3) -> None:
        with self.tracer.start_as_current_span("step", attributes={"verl.global_step": n}):
            for i in range(children):
                with self.tracer.start_as_current_span(f"phase-{i}"):
                    pass

    def flush(self, timeout_s: float) -> bool:
        return bool(self.provider.force_flush(int(timeout_s * 1000)))

    def close(self) -> None:
        self.buffer.shutdown()


def _steps(rx: OtlpReceiver) -> set[int]:
    with rx.received.lock:
        return {int(s.attributes["verl.global_step"]) for s in rx.received.spans if s.name == "step"}


def _wait(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _start_on(port: int, timeout: float = 10.0) -> OtlpReceiver:
    """A receiver on ``port`` once the closed server's accept loop let go of it (up to its 0.5 s tick)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return OtlpReceiver(grpc_port=port).start()
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture
def rx():
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED])
def test_grpc_refusing_for_a_while_then_every_span_arrives(tmp_path, rx, code):
    rx.refuse = code
    run = Run(tmp_path, rx.grpc_endpoint)
    try:
        for n in range(5):
            run.step(n)
        assert run.flush(0.5) is False  # the collector refuses: nothing could be sent, nothing is lost
        assert _wait(lambda: rx.refused >= 2), "the sender retries"
        assert _steps(rx) == set()
        rx.refuse = None
        assert run.flush(30), run.buffer.pending()
        assert _steps(rx) == set(range(5))
        assert len(rx.received.spans) == 5 * 4
        assert sum(run.drops.values()) == 0, run.drops
        assert run.buffer.retries >= 2
    finally:
        run.close()


def test_collector_killed_and_restarted_on_the_same_port(tmp_path, rx):
    run = Run(tmp_path, rx.grpc_endpoint)
    try:
        run.step(0)
        assert run.flush(20) and _steps(rx) == {0}
        rx.stop()
        for n in range(1, 4):
            run.step(n)
        assert run.flush(1.0) is False
        rx.start()  # same ports
        t0 = time.monotonic()
        assert run.flush(30), run.buffer.pending()
        # reached without waiting for gRPC's own reconnect backoff (which grows to minutes)
        assert time.monotonic() - t0 < 15
        assert _steps(rx) == {0, 1, 2, 3}
        assert sum(run.drops.values()) == 0, run.drops
    finally:
        run.close()


def test_connections_reset_then_a_collector_answers(tmp_path):
    bad = BadCollector("reset")
    port = bad.port
    run = Run(tmp_path, bad.endpoint)
    rx = None
    try:
        for n in range(3):
            run.step(n)
        assert run.flush(1.0) is False
        assert _wait(lambda: bad.connections >= 1)
        bad.close()
        rx = _start_on(port)
        assert run.flush(30), run.buffer.pending()
        assert _steps(rx) == {0, 1, 2}
        assert sum(run.drops.values()) == 0, run.drops
    finally:
        run.close()
        bad.close()
        if rx is not None:
            rx.stop()


@pytest.mark.parametrize(("status", "retry_after"), [(503, None), (429, "1"), (502, None), (504, "0")])
def test_http_retryable_statuses_wait_and_arrive(tmp_path, rx, status, retry_after):
    rx.http_status, rx.retry_after = status, retry_after
    run = Run(tmp_path, rx.http_endpoint, protocol="http/protobuf")
    try:
        run.step(0)
        run.step(1)
        assert _wait(lambda: rx.refused >= 2)
        rx.http_status = None
        assert run.flush(30), run.buffer.pending()
        assert _steps(rx) == {0, 1}
        assert sum(run.drops.values()) == 0, run.drops
    finally:
        run.close()


@pytest.mark.parametrize(
    ("protocol", "refusal"),
    [
        ("grpc", grpc.StatusCode.INVALID_ARGUMENT),
        ("grpc", grpc.StatusCode.UNAUTHENTICATED),
        ("http", 400),
        ("http", 401),
    ],
)
def test_a_permanent_refusal_is_counted_not_retried(tmp_path, rx, protocol, refusal):
    if protocol == "grpc":
        rx.refuse = refusal
        run = Run(tmp_path, rx.grpc_endpoint)
    else:
        rx.http_status = refusal
        run = Run(tmp_path, rx.http_endpoint, protocol="http/protobuf")
    try:
        run.step(0)
        assert run.flush(20)  # answered: nothing waits
        run.step(1)
        assert run.flush(20)
        assert rx.refused == 2  # each batch tried once
        assert run.drops == {sc.DROP_REJECTED: 8}
        assert _steps(rx) == set()
    finally:
        run.close()


def test_a_full_buffer_goes_to_disk_then_drops_the_oldest_counted(tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nobody there
    run = Run(tmp_path, endpoint, buffer_mb="0.004")  # ~4 KB in memory and again on disk
    try:
        for n in range(60):
            run.step(n)
            run.flush(0.01)  # one batch per step
        assert _wait(lambda: run.drops[sc.DROP_BUFFER_FULL] > 0)
        _, in_memory = run.buffer.pending()
        assert in_memory <= run.settings.export_buffer_bytes + 2000  # one batch may pass the bound
        on_disk = run.buffer.waiting_on_disk
        unsent = list((tmp_path / sc.UNSENT_DIR).glob("*.jsonl"))
        assert len(unsent) == 1 and unsent[0].stat().st_size <= run.settings.export_buffer_bytes
        assert on_disk > 0
        # every span is somewhere: in memory, on disk, or dropped and counted (nothing vanished)
        from verl_otel.analysis.otlp_json import read_file

        assert len(read_file(unsent[0]).spans) == on_disk
        assert set(run.drops) == {sc.DROP_BUFFER_FULL}
        assert run.drops[sc.DROP_BUFFER_FULL] + on_disk + _memory_spans(run) == 60 * 4
    finally:
        run.close()


def test_spilled_batches_are_sent_from_disk_while_the_process_runs(tmp_path, rx):
    """The memory part overflowed into the unsent file during an outage: once the collector answers, the
    sender sends the file (oldest first) and then memory, on its own, and the file is gone: nothing waits
    for push."""
    rx.refuse = grpc.StatusCode.UNAVAILABLE
    run = Run(tmp_path, rx.grpc_endpoint, buffer_mb="0.008")  # ~8 KB in memory and again on disk
    try:
        for n in range(16):
            run.step(n)
            run.flush(0.01)  # one batch per step
        assert _wait(lambda: run.buffer.waiting_on_disk > 0 and rx.refused >= 2)
        assert list((tmp_path / sc.UNSENT_DIR).glob("*.jsonl"))
        rx.refuse = None  # no flush from here on: the sender alone
        assert _wait(lambda: _steps(rx) == set(range(16)), timeout=60), (_steps(rx), run.buffer.pending())
        assert _wait(lambda: not list((tmp_path / sc.UNSENT_DIR).glob("*")))  # delivered, cut off the file
        assert run.buffer.waiting_on_disk == 0
        with rx.received.lock:
            order = [int(s.attributes["verl.global_step"]) for s in rx.received.spans if s.name == "step"]
        assert order[0] == 0 and order == sorted(order)  # the file's (oldest) batches first
        assert len(rx.received.spans) == 16 * 4 and sum(run.drops.values()) == 0, run.drops
    finally:
        run.close()


def _memory_spans(run: Run) -> int:
    with run.buffer._cond:
        batches = list(run.buffer._queue) + list(run.buffer._inflight or [])
    return sum(b.spans for b in batches)


def test_export_never_waits_on_the_network(tmp_path):
    """The SDK's export thread hands a batch over and returns, whatever the collector does (a blackhole)."""
    with BadCollector("blackhole") as bad:
        run = Run(tmp_path, bad.endpoint)
        try:
            spans = []
            for n in range(20):
                with run.tracer.start_as_current_span("step", attributes={"verl.global_step": n}) as span:
                    spans.append(span)
            t0 = time.perf_counter()
            for _ in range(20):
                run.buffer.export(spans)  # type: ignore[arg-type]
            assert time.perf_counter() - t0 < 0.5
        finally:
            run.close()


def test_an_engine_provider_has_an_unsent_file_of_its_own(tmp_path):
    """Two buffers of one process (ours and the inference engine's) never append to the same file."""
    run = Run(tmp_path, f"http://127.0.0.1:{free_port()}")
    buffers: list[BufferedSpanExporter] = []
    providers.tracer_provider(
        run.settings,
        providers.resource("rollout", None, {}),
        lambda r, n: None,
        children_only=True,
        on_buffer=buffers.append,
    )
    try:
        assert len(buffers) == 1
        assert buffers[0]._unsent.name.endswith("-engine.jsonl")
        assert buffers[0]._unsent != run.buffer._unsent
        assert buffers[0]._unsent.parent == run.buffer._unsent.parent == tmp_path / sc.UNSENT_DIR
    finally:
        buffers[0].shutdown()
        run.close()


def test_a_slow_collector_gets_the_queued_batches_together(tmp_path, rx):
    """Batches that queued while one request was answered slowly go in one request, not one each (a
    collector taking 1 s an answer would otherwise fall further behind with every batch)."""
    rx.delay_s = 1.0
    run = Run(tmp_path, rx.grpc_endpoint)
    try:
        for n in range(12):
            run.step(n)
            run.flush(0.01)  # a batch of its own each
        assert run.flush(60), run.buffer.pending()
        assert _steps(rx) == set(range(12))
        assert rx.received.requests <= 4, rx.received.requests
    finally:
        run.close()
