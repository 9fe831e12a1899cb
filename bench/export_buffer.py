"""The OTLP span buffer (verl_otel/export/span_buffer.py) against a local gRPC TraceService:

- buffer_export_us: per span, what the SDK's export thread spends in our exporter on the happy path (encode
  once + enqueue; the send runs on the sender thread), beside the SDK's own OTLPSpanExporter.export (encode +
  a blocking send), and the end-to-end time per span until the receiver has it (force_flush).
- drain_s: a buffer filled with ``mb`` MB while the receiver refuses (UNAVAILABLE), then the time from the
  receiver accepting again until the buffer is empty, and the rate.
"""

from __future__ import annotations

import socket
import tempfile
import time
from concurrent import futures
from pathlib import Path
from typing import Any


class _Receiver:
    """A gRPC OTLP TraceService on 127.0.0.1 that counts spans, or refuses with UNAVAILABLE."""

    def __init__(self) -> None:
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        rx = self
        self.spans = 0
        self.refuse = False
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]

        class Svc(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC method name
                if rx.refuse:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "refusing")
                rx.spans += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
                return trace_service_pb2.ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Svc(), self.server)
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        self.server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _spans(n: int) -> list[Any]:
    """``n`` finished SDK spans shaped like a step's phases (a few attributes each)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    mem = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(mem))
    tracer = provider.get_tracer("bench")
    with tracer.start_as_current_span("step", attributes={"verl.global_step": 1}):
        for i in range(n - 1):
            with tracer.start_as_current_span("update_actor", attributes={"verl.phase": "update_actor", "i": i}):
                pass
    return list(mem.get_finished_spans())


def _buffer(endpoint: str, limit_mb: float) -> Any:
    from verl_otel.export.otlp_send import make_sender
    from verl_otel.export.span_buffer import BufferedSpanExporter

    unsent = Path(tempfile.mkdtemp(prefix="verl-otel-bench-")) / "unsent" / "spans.jsonl"
    return BufferedSpanExporter(make_sender(endpoint, "grpc", 5.0, False), int(limit_mb * 2**20), unsent, _no_drop)


def _no_drop(reason: str, n: int) -> None:
    pass


def buffer_export_us(batch: int = 512, rounds: int = 20) -> tuple[float, float, float]:
    """(our export µs/span, the SDK exporter's export µs/span, ours end to end µs/span)."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    rx = _Receiver()
    spans = _spans(batch)
    ours = _buffer(rx.endpoint, 64)
    sdk = OTLPSpanExporter(endpoint=rx.endpoint, insecure=True, timeout=5)
    try:
        ours.export(spans)  # connect once, outside the timing
        ours.force_flush(10_000)
        sdk.export(spans)
        fg, e2e, base = [], [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            ours.export(spans)
            t1 = time.perf_counter()
            ours.force_flush(10_000)
            t2 = time.perf_counter()
            sdk.export(spans)
            t3 = time.perf_counter()
            fg.append((t1 - t0) / batch * 1e6)
            e2e.append((t2 - t0) / batch * 1e6)
            base.append((t3 - t2) / batch * 1e6)
        return min(fg), min(base), min(e2e)
    finally:
        ours.shutdown()
        sdk.shutdown()
        rx.server.stop(None)


def drain_s(mb: float = 8.0, batch: int = 512) -> tuple[float, float, int]:
    """(seconds to send a buffer of ``mb`` MB once the receiver accepts again, MB/s, spans sent)."""
    rx = _Receiver()
    rx.refuse = True
    spans = _spans(batch)
    ours = _buffer(rx.endpoint, mb * 2)  # room for it all in memory
    try:
        while ours.pending()[1] < mb * 2**20:
            ours.export(spans)
        _, size = ours.pending()
        total = ours.pending()[0] * batch
        rx.refuse = False
        t0 = time.perf_counter()
        if not ours.force_flush(600_000):
            raise RuntimeError("the buffer did not drain")
        took = time.perf_counter() - t0
        if rx.spans != total:
            raise RuntimeError(f"the receiver has {rx.spans} of {total} spans")
        return took, size / 2**20 / took, total
    finally:
        ours.shutdown()
        rx.server.stop(None)


if __name__ == "__main__":
    ours_us, sdk_us, e2e_us = buffer_export_us()
    print(f"buffer_export_us {ours_us:.2f} (the SDK exporter's export: {sdk_us:.2f}; ours end to end {e2e_us:.2f})")
    took, rate, n = drain_s()
    print(f"drain_s {took:.2f} for 8 MB ({n} spans, {rate:.1f} MB/s)")
