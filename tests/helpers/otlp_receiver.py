"""A protocol-level OTLP receiver for tests: real gRPC (TraceService/MetricsService) and real
OTLP/HTTP (protobuf POST /v1/traces, /v1/metrics) on 127.0.0.1 (or ``host``), decoding what it receives.

It can be stopped and restarted on the same ports (collector going away and coming back) and
can answer slowly (a collector under load). Spans arrive as the tests' span reader gives them
(tests/helpers/traces.py).
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from helpers.traces import spans_of_request

from verl_otel.analysis.step_traces import Span
from verl_otel.native import ports


def free_port() -> int:
    """Outside the ephemeral range: a receiver restarted on it (the outage tests) finds it still free."""
    return ports.free_port()


@dataclass
class Received:
    spans: list[Span] = field(default_factory=list)
    metric_names: set[str] = field(default_factory=set)
    metric_points: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    exemplars: list[tuple[str, str]] = field(default_factory=list)  # (metric, trace id) of histogram points
    requests: int = 0
    trace_headers: list[dict[str, str]] = field(default_factory=list)  # each OTLP/HTTP trace request's headers
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_traces(self, req: trace_service_pb2.ExportTraceServiceRequest) -> None:
        spans = spans_of_request(req)  # the tests' one span reader
        with self.lock:
            self.requests += 1
            self.spans.extend(spans)

    def add_metrics(self, req: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        with self.lock:
            self.requests += 1
            for rm in req.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        self.metric_names.add(m.name)
                        kind = m.WhichOneof("data")
                        for p in getattr(getattr(m, kind), "data_points", []):
                            labels = {a.key: str(_any(a.value)) for a in p.attributes}
                            if kind in ("gauge", "sum"):
                                val = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                            else:  # histogram: its sum
                                val = p.sum
                                self.exemplars += [(m.name, e.trace_id.hex()) for e in p.exemplars if e.trace_id]
                            self.metric_points.append((m.name, labels, float(val)))


def _any(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class _TraceSvc(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, rx: OtlpReceiver) -> None:
        self.rx = rx

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC method name
        self.rx._delay()
        code = self.rx.refuse
        if code is not None:
            self.rx.refused += 1
            context.abort(code, "refused by the test receiver")
        self.rx.received.add_traces(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class _MetricsSvc(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, rx: OtlpReceiver) -> None:
        self.rx = rx

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.rx._delay()
        if self.rx.refuse is not None and self.rx.refuse_metrics:
            self.rx.refused += 1
            context.abort(self.rx.refuse, "refused by the test receiver")
        self.rx.received.add_metrics(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class OtlpReceiver:
    def __init__(
        self, grpc_port: int | None = None, http_port: int | None = None, delay_s: float = 0.0, host: str = "127.0.0.1"
    ) -> None:
        self.host = host
        self.grpc_port = grpc_port or free_port()
        self.http_port = http_port or free_port()
        self.delay_s = delay_s
        self.received = Received()
        # refusing: gRPC answers this status code, HTTP this status (with Retry-After when retry_after is set)
        self.refuse: grpc.StatusCode | None = None
        self.http_status: int | None = None
        self.retry_after: str | None = None
        self.refused = 0
        self.refuse_metrics = True  # False: metrics are taken while ``refuse`` refuses traces
        self._grpc: grpc.Server | None = None
        self._http: ThreadingHTTPServer | None = None

    @property
    def grpc_endpoint(self) -> str:
        return f"http://{self.host}:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    def _delay(self) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)

    def start(self) -> OtlpReceiver:
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceSvc(self), self._grpc)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_MetricsSvc(self), self._grpc)
        self._grpc.add_insecure_port(f"{self.host}:{self.grpc_port}")
        self._grpc.start()
        rx = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                rx._delay()
                if rx.http_status is not None:
                    rx.refused += 1
                    self.send_response(rx.http_status)
                    if rx.retry_after is not None:
                        self.send_header("Retry-After", rx.retry_after)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path == "/v1/traces":
                    req = trace_service_pb2.ExportTraceServiceRequest()
                    req.ParseFromString(body)
                    with rx.received.lock:
                        rx.received.trace_headers.append({k.lower(): v for k, v in self.headers.items()})
                    rx.received.add_traces(req)
                    resp = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    mreq = metrics_service_pb2.ExportMetricsServiceRequest()
                    mreq.ParseFromString(body)
                    rx.received.add_metrics(mreq)
                    resp = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(resp)))
                self.end_headers()
                self.wfile.write(resp)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer((self.host, self.http_port), Handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace=None)
            self._grpc = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.received.lock:
                if predicate(self.received):
                    return True
            time.sleep(0.1)
        return False

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
