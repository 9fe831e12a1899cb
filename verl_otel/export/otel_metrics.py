"""Push path: OTLP metrics, every ``OTEL_METRIC_EXPORT_INTERVAL`` ms (default 5 s).

Gauges and the drop counter are observable instruments whose callbacks read
the runtime's :class:`~verl_otel.process.metrics.MetricStore`; histograms are recorded when observed, inside the step
span's context, so the SDK attaches the trace id as exemplar. Names and units are chosen (in
semconv) so the Collector's prometheus exporter turns them back into the documented names.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from verl_otel import semconv as sc
from verl_otel.config import Settings
from verl_otel.process.metrics import Labels, MetricStore
from verl_otel.process.text import utf8


def _attrs(metric: sc.MetricDef, labels: Labels) -> dict[str, str]:
    return {name: utf8(value) for name, value in zip(metric.labels, labels, strict=False)}


class _Collected:
    """One read of the store per export: the SDK calls every observable instrument's callback in
    turn within milliseconds, and they share one grouped ``store.exported()`` (not one each)."""

    def __init__(self, store: MetricStore, max_age_s: float) -> None:
        self.store, self.max_age_s = store, max_age_s
        self._lock = threading.Lock()
        self._at: float | None = None
        self._by_metric: dict[str, list[Observation]] = {}

    def observations(self, metric: sc.MetricDef) -> list[Observation]:
        now = time.monotonic()
        with self._lock:
            if self._at is None or now - self._at > self.max_age_s:
                grouped: dict[str, list[Observation]] = defaultdict(list)
                for m, labels, v in self.store.exported():
                    grouped[m.name].append(Observation(v, _attrs(m, labels)))
                self._by_metric, self._at = grouped, now
            return self._by_metric.get(metric.name, [])


def start_push(store: MetricStore, settings: Settings, resource: Resource | None, given: Any = None) -> Any:
    """Instruments reading ``store`` in the caller's meter provider (``given``), or in ours exporting OTLP."""
    provider = given if given is not None else _provider(settings, resource)
    meter = provider.get_meter(sc.INSTRUMENTATION_NAME, sc.INSTRUMENTATION_VERSION)
    _instruments(meter, store, settings)
    return provider


def _provider(settings: Settings, resource: Resource | None) -> MeterProvider:
    if settings.protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HttpExp,
        )

        exporter: Any = HttpExp(timeout=5)
    else:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcExp,
        )

        exporter = GrpcExp(timeout=5)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=settings.metric_export_interval_ms)
    views = [
        View(instrument_name=m.otel_name, aggregation=ExplicitBucketHistogramAggregation(m.buckets))
        for m in sc.METRICS
        if m.kind == "histogram"
    ]
    return MeterProvider(
        metric_readers=[reader], resource=resource or Resource.create(), views=views, shutdown_on_exit=False
    )


def _instruments(meter: Any, store: MetricStore, settings: Settings) -> None:
    collected = _Collected(store, max_age_s=min(0.5, settings.metric_export_interval_ms / 4000))

    def _callback_for(metric: sc.MetricDef) -> Any:
        def callback(options: CallbackOptions) -> list[Observation]:
            return collected.observations(metric)

        return callback

    histograms = {}
    for metric in sc.METRICS:
        if metric.kind == "gauge":
            meter.create_observable_gauge(metric.otel_name, [_callback_for(metric)], metric.unit, metric.help)
        elif metric.kind == "counter":
            meter.create_observable_counter(metric.otel_name, [_callback_for(metric)], metric.unit, metric.help)
        else:
            histograms[metric] = meter.create_histogram(metric.otel_name, metric.unit, metric.help)

    def record(metric: sc.MetricDef, labels: Labels, value: float, trace_id: str | None) -> None:
        ctx = None
        if trace_id:
            # a sampled span context carrying the step's trace id: the SDK's exemplar filter keeps it
            span_ctx = SpanContext(int(trace_id, 16), 1, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
            ctx = trace.set_span_in_context(NonRecordingSpan(span_ctx))
        histograms[metric].record(value, _attrs(metric, labels), context=ctx)

    store.on_histogram.append(record)
