"""The OpenTelemetry SDK objects of one process: resource, tracer provider with its span exporter (OTLP
gRPC/HTTP, or the embedded default ``$VERL_OTEL_DIR/traces.jsonl``), and the metric exporters (the
/metrics endpoint and OTLP push). Only :mod:`verl_otel.runtime` calls this module; every OTEL_* value
was checked by :func:`verl_otel.config.sanitize_otel_env` before anything here reads it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

from verl_otel import config as cfg
from verl_otel import semconv as sc
from verl_otel._log import warn_once
from verl_otel.export.otlp_json import OtlpJsonFileExporter
from verl_otel.export.sdk_private import span_queue
from verl_otel.export.span_buffer import BufferedSpanExporter, unsent_path
from verl_otel.process.metrics import MetricStore

Drop = Callable[[str, int], None]
#: an engine's request spans exported per trace and rollout server: the first 4 x VERL_OTEL_SAMPLE_SPANS, then
#: the 4 x VERL_OTEL_SAMPLE_SPANS slowest of the rest (export/engine_cap.py)
ENGINE_SPANS_PER_SAMPLE_SPAN = 4


def instance_id(host: str, process_role: str, index: int | None, pid: int) -> str:
    """Unique per process (two processes sharing it would overwrite each other's series behind the Collector),
    so the pid is in it; the rest makes ``$instance`` readable: ``node-1/agent_loop_worker-0/4242``."""
    return f"{host}/{process_role}{'' if index is None else f'-{index}'}/{pid}"


_preset = threading.local()
_urgent = threading.local()


@contextmanager
def urgent_export() -> Iterator[None]:
    """Spans this thread ends meanwhile are exported here and now, past the batch queue, with what waits in that
    queue (a process about to be killed: the queue's thread would not get to them). The trace file is written; an
    OTLP buffer holds them for the caller to spill."""
    held: dict[int, tuple[_CountingProcessor, list[Any]]] = {}
    _urgent.held = held
    try:
        yield
    finally:
        _urgent.held = None
        for processor, spans in held.values():  # one write per exporter, the queued (older) spans first
            processor.export_now([*processor.take_queued(), *spans])


@contextmanager
def preset_span_id(span_id: int | None) -> Iterator[None]:
    """The next span this thread starts on one of our providers gets ``span_id`` (a sample span whose engine
    requests named it as their parent before it existed)."""
    _preset.span_id = span_id
    try:
        yield
    finally:
        _preset.span_id = None


class PresetIds(RandomIdGenerator):
    """Random ids, except a span id set by :func:`preset_span_id` (used once)."""

    def generate_span_id(self) -> int:
        preset = getattr(_preset, "span_id", None)
        if preset:
            _preset.span_id = None
            return int(preset)
        return super().generate_span_id()


def resource(process_role: str, index: int | None, run: Mapping[str, str], deprecated_names: bool = True) -> Resource:
    """The process' resource; ``index``: its index within its process role, under the key naming what it counts
    (an agent-loop worker's, a replica's: semconv.INDEX_OF_PROCESS_ROLE), and the deprecated key too unless switched
    off."""
    host, pid = cfg.hostname(), os.getpid()
    # ours wins over OTEL_RESOURCE_ATTRIBUTES' service.instance.id: one value there is shared by every process
    attrs: dict[str, Any] = {
        sc.RES_PROCESS_ROLE: process_role,
        sc.RES_NODE: host,
        sc.RES_PID: pid,
        sc.RES_INSTANCE: instance_id(host, process_role, index, pid),
        **run,
    }
    if index is not None:
        if process_role in sc.INDEX_OF_PROCESS_ROLE:
            attrs[sc.INDEX_OF_PROCESS_ROLE[process_role]] = index
        if deprecated_names or process_role not in sc.INDEX_OF_PROCESS_ROLE:
            attrs[sc.RES_DEPRECATED_WORKER_INDEX] = index
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attrs["service.name"] = sc.SERVICE_NAME_DEFAULT  # else Resource.create reads it from the environment
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


def quiet_sdk_logs() -> None:
    for name in (
        "opentelemetry.exporter.otlp.proto.grpc.exporter",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry.exporter.otlp.proto.http.metric_exporter",
        "opentelemetry.sdk._shared_internal",
        "opentelemetry.sdk.trace.export",
        "opentelemetry.sdk.metrics._internal.export",
        "opentelemetry.attributes",
    ):
        lg = logging.getLogger(name)
        if not any(isinstance(f, _OnceFilter) for f in lg.filters):
            lg.addFilter(_OnceFilter())


class _CountingProcessor(BatchSpanProcessor):
    """A bounded queue (OTEL_BSP_MAX_QUEUE_SIZE, 2048): a span that finds it full is dropped and counted,
    never waited for."""

    def __init__(self, exporter: SpanExporter, drop: Drop) -> None:
        super().__init__(exporter, schedule_delay_millis=_schedule_delay_ms())
        self._drop = drop
        self._exporter = exporter

    def on_end(self, span: Any) -> None:
        held = span_queue(self)  # the SDK's private fields, read in one guarded place
        if held is not None and len(held[0]) >= held[1]:
            self._drop(sc.DROP_QUEUE, 1)
            warn_once(
                "queue-full",
                "span queue full (collector slow or down): spans are dropped and counted in verl_otel_dropped_total",
            )
        held = getattr(_urgent, "held", None)
        if held is not None:
            held.setdefault(id(self), (self, []))[1].append(span)
            return
        super().on_end(span)

    def take_queued(self) -> list[Any]:
        """What waits in the batch queue, taken out (urgent_export writes it on the calling thread)."""
        inner = getattr(self, "_batch_processor", self)
        queue = getattr(inner, "_queue", None)
        taken: list[Any] = []
        with contextlib.suppress(IndexError, AttributeError, TypeError):  # emptied meanwhile, or another SDK
            while queue:
                taken.append(queue.popleft())
        return taken

    def export_now(self, spans: list[Any]) -> None:
        if spans:
            self._exporter.export(spans)

    def force_flush(self, timeout_millis: int | None = None) -> bool:
        """The queue to the exporter, then the exporter's own buffer (sent, or the time is up)."""
        timeout_ms = 30000 if timeout_millis is None else timeout_millis
        deadline = time.monotonic() + timeout_ms / 1000
        done = bool(super().force_flush(timeout_ms))
        left_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
        return self._exporter.force_flush(left_ms) and done


def _schedule_delay_ms() -> int:
    """1 s unless the user chose (the SDK's 5 s default makes a short step's spans late)."""
    return int(os.environ.get("OTEL_BSP_SCHEDULE_DELAY") or 1000)


def otlp_timeout_s() -> float:
    """Seconds per send attempt: the user's OTLP timeout (seconds, as the SDK reads it), else 5 s (a
    collector that never answers holds the sender, never a training thread, that long per try)."""
    raw = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or os.environ.get("OTEL_EXPORTER_OTLP_TIMEOUT")
    try:
        val = float(raw) if raw else 5.0
    except ValueError:
        val = 5.0
    return val if 0 < val < 3600 else 5.0


def span_exporter(
    settings: cfg.Settings,
    drop: Drop,
    on_buffer: Callable[[BufferedSpanExporter], None] | None = None,
    tag: str = "",
) -> tuple[SpanExporter, str]:
    """OTLP push through our buffer (a batch the collector cannot take now waits, bounded), or the trace file.
    ``on_buffer`` is handed the buffer (the runtime writes what is left of it to ``unsent/`` at exit)."""
    if settings.traces_endpoint is not None:
        try:
            from verl_otel.export.otlp_send import make_sender

            endpoint = settings.traces_endpoint
            specific = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip() == endpoint
            sender = make_sender(endpoint, settings.protocol, otlp_timeout_s(), specific)
            unsent = unsent_path(settings.data_dir, tag)
            buffer = BufferedSpanExporter(sender, settings.export_buffer_bytes, unsent, drop, tag)
            if on_buffer is not None:
                on_buffer(buffer)
            kind = "OTLP/HTTP" if settings.protocol == "http/protobuf" else "OTLP/gRPC"
            return buffer, f"{kind} {sender.endpoint}"
        except Exception as exc:  # noqa: BLE001
            warn_once("otlp-exporter", f"cannot create the OTLP span exporter ({exc}); using the local trace file")
    path = settings.data_dir / sc.TRACES_FILE
    exporter = OtlpJsonFileExporter(
        path, settings.max_file_bytes, settings.max_files, on_drop=lambda n: drop(sc.DROP_WRITE, n)
    )
    return exporter, str(path)


class _SpanAttributes(SpanProcessor):
    """Adds fixed attributes to every span as it starts (the rollout replica on vLLM's spans)."""

    def __init__(self, attributes: Mapping[str, Any]) -> None:
        self._attributes = dict(attributes)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        span.set_attributes(self._attributes)


def tracer_provider(
    settings: cfg.Settings,
    res: Resource,
    drop: Drop,
    children_only: bool = False,
    span_attributes: Mapping[str, Any] | None = None,
    on_buffer: Callable[[BufferedSpanExporter], None] | None = None,
    every_tick: Callable[[Callable[[], object]], None] | None = None,
) -> tuple[TracerProvider, str]:
    """Our provider. Text attributes are cut at VERL_OTEL_MAX_TEXT (or the user's smaller OTEL limit).
    ``children_only``: an engine's provider, whose spans exist only under a sampled parent (no roots), at most
    8 x VERL_OTEL_SAMPLE_SPANS per trace (export/engine_cap.py; ``every_tick`` releases the held ones)."""
    limit = settings.max_text
    user_limit = os.environ.get("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT") or os.environ.get(
        "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"
    )
    if user_limit:
        limit = min(limit, int(user_limit))
    # PresetIds: a sample span takes the id its engine request was given as parent (telemetry/engine_context)
    sampler = ParentBased(ALWAYS_OFF) if children_only else None  # None: the SDK's, from OTEL_TRACES_SAMPLER
    provider = TracerProvider(
        resource=res,
        shutdown_on_exit=False,
        id_generator=PresetIds(),
        sampler=sampler,
        span_limits=SpanLimits(max_attribute_length=limit),
    )
    exporter, destination = span_exporter(settings, drop, on_buffer, "-engine" if children_only else "")
    if span_attributes:
        provider.add_span_processor(_SpanAttributes(span_attributes))
    processor: SpanProcessor = _CountingProcessor(exporter, drop)
    if children_only:
        from verl_otel.export.engine_cap import EngineSpanCap

        cap = EngineSpanCap(processor, ENGINE_SPANS_PER_SAMPLE_SPAN * settings.sample_spans)
        if every_tick is not None:
            every_tick(cap.release)
        processor = cap
    provider.add_span_processor(processor)
    return provider, destination


def start_pull(
    store: MetricStore,
    settings: cfg.Settings,
    labels: dict[str, str],
    listed: Callable[[str, int, dict[str, str]], None],
) -> None:
    """The /metrics endpoint, on by default in the embedded mode, handed to ``listed`` (the runtime's
    ProcessTargets: the file_sd entry and Ray's store, written by the flusher, never a training thread). It
    listens on ``VERL_OTEL_PROMETHEUS_HOST``, by default 127.0.0.1 or, on a Ray cluster's worker node, the node's
    IP (the head's Prometheus must reach it)."""
    if settings.prometheus_port is None:
        return
    bind = settings.prometheus_host if settings.prometheus_host_given else None
    try:
        from verl_otel.export import prometheus
        from verl_otel.export.ray_store import node_ip_bind

        bind = bind or node_ip_bind()
        port = prometheus.serve(store, bind, settings.prometheus_port)
        listed(bind, port, labels)
    except Exception as exc:  # noqa: BLE001 - e.g. the port is taken
        warn_once(
            "prom-serve",
            f"cannot serve /metrics on {bind or settings.prometheus_host}:"
            f"{settings.prometheus_port}: {exc}; the pull path is off in pid {os.getpid()}",
        )


def start_push(store: MetricStore, settings: cfg.Settings, res: Resource | None, given: Any = None) -> Any:
    """OTLP metrics push when an endpoint is configured (or into the caller's meter provider)."""
    if settings.metrics_endpoint is None and given is None:
        return None
    try:
        from verl_otel.export.otel_metrics import start_push as _start

        return _start(store, settings, res, given)
    except Exception as exc:  # noqa: BLE001
        warn_once("otlp-metrics", f"cannot start OTLP metrics export: {exc}")
        return None
