"""Per-process OpenTelemetry SDK setup, done lazily on first use and after any fork (exporters are
not fork-safe). Resource attributes say what the process is; OTEL_* variables are honoured.

With an OTLP endpoint, spans go there (gRPC or HTTP); without one, to the embedded default:
``$VERL_OTEL_DIR/traces.jsonl``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from verl_otel import config as cfg
from verl_otel import semconv as sc
from verl_otel._log import logger, warn_once
from verl_otel.export.otlp_json import OtlpJsonFileExporter

_lock = threading.RLock()
_role: tuple[str, int | None] = (os.environ.get(sc.ENV_ROLE, sc.ROLE_OTHER), None)
_run: dict[str, str] = {}  # verl.project / verl.experiment, where this process knows them


@dataclass
class Telemetry:
    """What one process exports through."""

    pid: int
    settings: cfg.Settings
    provider: TracerProvider
    tracer: trace.Tracer
    destination: str
    meter_provider: Any = None

    def flush(self, *, block: bool, timeout_s: float = 5.0) -> None:
        """Push finished spans out. Non-blocking flushes run on a daemon thread so a slow or
        unreachable collector never stalls a training step."""

        def _do() -> None:
            try:
                self.provider.force_flush(int(timeout_s * 1000))
                if self.meter_provider is not None:
                    self.meter_provider.force_flush(int(timeout_s * 1000))
            except Exception as exc:  # noqa: BLE001
                warn_once("flush", f"flushing spans failed: {exc}")

        if block:
            _do()
        else:
            threading.Thread(target=_do, name="verl-otel-flush", daemon=True).start()

    def flush_finished(self) -> None:
        """After a unit of work ends (a step, a worker's batch): blocking for the local file (cheap),
        in the background for OTLP (a slow collector must not stall training)."""
        self.flush(block=self.settings.embedded)


_current: Telemetry | None = None


def set_role(role: str, worker_index: int | None = None) -> None:
    """Declare what this process is, before its first span. Later calls refine the resource only
    if the SDK is not set up yet (a resource is immutable once a provider exists)."""
    global _role
    with _lock:
        if _current is None or _current.pid != os.getpid():
            _role = (role, worker_index)


def set_run(project: str | None, experiment: str | None) -> None:
    """Which run this process belongs to (before its first span / metrics endpoint)."""
    with _lock:
        if project:
            _run[sc.RES_PROJECT] = str(project)
        if experiment:
            _run[sc.RES_EXPERIMENT] = str(experiment)


def run_labels() -> dict[str, str]:
    """Target labels of this process for Prometheus (same names as the push path's)."""
    labels = {sc.LABEL_PROCESS_ROLE: _role[0]}
    if sc.RES_PROJECT in _run:
        labels[sc.LABEL_PROJECT] = _run[sc.RES_PROJECT]
    if sc.RES_EXPERIMENT in _run:
        labels[sc.LABEL_EXPERIMENT] = _run[sc.RES_EXPERIMENT]
    return labels


def _resource() -> Resource:
    role, index = _role
    attrs: dict[str, object] = {
        "service.name": os.environ.get("OTEL_SERVICE_NAME") or sc.SERVICE_NAME_DEFAULT,
        sc.RES_ROLE: role,
        sc.RES_NODE: socket.gethostname(),
        sc.RES_PID: os.getpid(),
        **_run,
    }
    if index is not None:
        attrs[sc.RES_WORKER_INDEX] = index
    if os.environ.get("OTEL_SERVICE_NAME"):
        attrs.pop("service.name")  # Resource.create reads it from the environment itself
    return Resource.create(attrs)


class _OnceFilter(logging.Filter):
    """Exporter retry warnings say the same thing every few seconds while a collector is down:
    let each distinct message template through once."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = f"{record.name}:{record.msg}"
        if key in self._seen:
            return False
        self._seen.add(key)
        return True


def _quiet_exporter_logs() -> None:
    for name in ("opentelemetry.exporter.otlp.proto.grpc.exporter",
                 "opentelemetry.exporter.otlp.proto.http.trace_exporter",
                 "opentelemetry.exporter.otlp.proto.http.metric_exporter",
                 "opentelemetry.sdk._shared_internal", "opentelemetry.sdk.trace.export"):
        lg = logging.getLogger(name)
        if not any(isinstance(f, _OnceFilter) for f in lg.filters):
            lg.addFilter(_OnceFilter())


class _CountingExporter(SpanExporter):
    """Counts spans an exporter could not deliver in verl_otel_dropped_total{reason="export_failed"}."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner

    def export(self, spans: Any) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception as exc:  # noqa: BLE001
            warn_once("export-raised", f"span export failed: {exc!r}; spans are dropped and counted")
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            from verl_otel.telemetry.metrics import STATE

            STATE.drop(sc.DROP_EXPORT, len(spans))
        return result

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self._inner.shutdown()


class _CountingProcessor(BatchSpanProcessor):
    """A bounded queue (OTEL_BSP_MAX_QUEUE_SIZE, 2048): a span that finds it full is dropped and counted,
    never waited for."""

    def on_end(self, span: Any) -> None:
        inner = getattr(self, "_batch_processor", None)
        queue = getattr(inner, "_queue", None)
        limit = getattr(inner, "_max_queue_size", None)
        if queue is not None and limit is not None and len(queue) >= limit:
            from verl_otel.telemetry.metrics import STATE

            STATE.drop(sc.DROP_QUEUE)
            warn_once("queue-full", "span queue full (collector slow or down): spans are dropped and counted "
                      "in verl_otel_dropped_total")
        super().on_end(span)


def _span_exporter(settings: cfg.Settings) -> tuple[SpanExporter, str]:
    if settings.traces_endpoint is not None:
        timeout = None if os.environ.get("OTEL_EXPORTER_OTLP_TIMEOUT") else 5
        try:
            if settings.protocol == "http/protobuf":
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExp

                return HttpExp(timeout=timeout), f"OTLP/HTTP {settings.traces_endpoint}"
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExp

            return GrpcExp(timeout=timeout), f"OTLP/gRPC {settings.traces_endpoint}"
        except Exception as exc:  # noqa: BLE001
            warn_once("otlp-exporter", f"cannot create the OTLP span exporter ({exc}); using the local trace file")
    path = settings.data_dir / sc.TRACES_FILE
    return OtlpJsonFileExporter(path), str(path)


def get() -> Telemetry:
    """The process' telemetry, created on first use (and again in a forked child)."""
    global _current
    cur = _current
    if cur is not None and cur.pid == os.getpid():
        return cur
    with _lock:
        if _current is not None and _current.pid == os.getpid():
            return _current
        settings = cfg.load()
        _quiet_exporter_logs()
        try:
            provider = TracerProvider(resource=_resource())
        except Exception as exc:  # noqa: BLE001 - e.g. a sampler argument the SDK rejects
            warn_once("provider", f"OTEL_* configuration rejected by the SDK ({exc}); using defaults")
            provider = TracerProvider(resource=Resource.create({"service.name": sc.SERVICE_NAME_DEFAULT}))
        exporter, destination = _span_exporter(settings)
        provider.add_span_processor(_CountingProcessor(_CountingExporter(exporter), schedule_delay_millis=1000))
        _current = Telemetry(
            pid=os.getpid(),
            settings=settings,
            provider=provider,
            tracer=provider.get_tracer(sc.INSTRUMENTATION_NAME),
            destination=destination,
        )
        logger.debug("spans of pid %s go to %s", os.getpid(), destination)
        return _current


_metrics_pid: int | None = None


def ensure_metrics() -> None:
    """Start this process' metric exporters once: the /metrics endpoint (pull; on by default in
    the embedded mode) and OTLP push when an endpoint is configured."""
    global _metrics_pid
    if _metrics_pid == os.getpid():
        return
    with _lock:
        if _metrics_pid == os.getpid():
            return
        _metrics_pid = os.getpid()
        from verl_otel.telemetry.metrics import STATE

        settings = get().settings
        STATE.max_series_per_metric = settings.max_metric_keys
        for reason in sc.DROP_REASONS:  # counters start at 0, so "nothing dropped" is a visible 0
            STATE.drop(reason, 0)
        if settings.prometheus_port is not None:
            try:
                from verl_otel.export import prometheus

                port = prometheus.serve(STATE, settings.prometheus_host, settings.prometheus_port)
                prometheus.register_target(settings.data_dir, settings.prometheus_host, port, run_labels())
            except Exception as exc:  # noqa: BLE001 - e.g. the port is taken
                warn_once("prom-serve", f"cannot serve /metrics on {settings.prometheus_host}:"
                          f"{settings.prometheus_port}: {exc}; the pull path is off in pid {os.getpid()}")
        if settings.metrics_endpoint is not None:
            try:
                from verl_otel.export.otel_metrics import start_push

                get().meter_provider = start_push(STATE, settings, get().provider.resource)
            except Exception as exc:  # noqa: BLE001
                warn_once("otlp-metrics", f"cannot start OTLP metrics export: {exc}")


def reset_for_tests() -> None:
    """Forget the process' telemetry (tests switch settings between runs)."""
    global _current
    global _metrics_pid
    with _lock:
        _metrics_pid = None
        if _current is not None:
            try:
                _current.provider.shutdown()
            except Exception:  # noqa: BLE001
                pass
        _current = None
