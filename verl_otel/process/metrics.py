"""The process' metric store, read by every exporter (Prometheus pull, OTLP push).

One per process, owned by :class:`verl_otel.runtime.Runtime`. Hot paths (one update per finished
rollout sample) only touch plain Python objects; values are read when a scraper or the OTLP reader
asks (an OTel API call per sample costs ~3 µs, an attribute increment 0.05 µs:
docs/performance.md). Histograms are updated once per step or
phase, so they are recorded eagerly, with the step's trace id as exemplar.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from verl_otel import semconv as sc
from verl_otel._log import warn_once

Labels = tuple[str, ...]
#: one gauge value: (metric, label values, value); "reading", not "sample" (a rollout sample is another thing)
Reading = tuple[sc.MetricDef, Labels, float]
Source = Callable[[], Iterable[Reading]]


@dataclass
class Exemplar:
    trace_id: str
    value: float
    timestamp: float


@dataclass
class HistogramSeries:
    bounds: tuple[float, ...]
    counts: list[int]
    total: float = 0.0
    count: int = 0
    exemplars: dict[int, Exemplar] = field(default_factory=dict)  # bucket index -> last exemplar

    def observe(self, value: float, trace_id: str | None) -> None:
        idx = bisect.bisect_left(self.bounds, value)  # bucket i holds value <= bounds[i]; last is +Inf
        self.counts[idx] += 1
        self.total += value
        self.count += 1
        if trace_id:
            self.exemplars[idx] = Exemplar(trace_id, value, time.time())


class MetricStore:
    """Gauges, counters and histograms of one process, keyed by (metric, label values)."""

    def __init__(self, max_series_per_metric: int = 2000, deprecated_names: bool = True) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[sc.MetricDef, Labels], float] = {}
        self._hist: dict[tuple[sc.MetricDef, Labels], HistogramSeries] = {}
        self._sources: list[Source] = []
        self._keys_per_metric: dict[str, int] = {}
        self.on_histogram: list[Callable[[sc.MetricDef, Labels, float, str | None], None]] = []
        self.max_series_per_metric = max_series_per_metric
        self.deprecated_names = deprecated_names  # renamed labels under their old name too (CHANGELOG.md)

    # -- writers --------------------------------------------------------------------------------
    def set(self, metric: sc.MetricDef, labels: Labels, value: float) -> bool:
        """Set a gauge. Returns False (and counts a drop) past the per-metric series cap."""
        key = (metric, labels)
        with self._lock:
            if key not in self._values:
                n = self._keys_per_metric.get(metric.name, 0)
                if n >= self.max_series_per_metric:
                    self._drop_locked(sc.DROP_KEY_CAP)
                    cap = self.max_series_per_metric
                    warn_once(
                        f"cap:{metric.name}",
                        f"{metric.name}: more than {cap} distinct label sets; "
                        f"new ones are dropped (raise {sc.ENV_MAX_METRIC_KEYS} to keep more)",
                    )
                    return False
                self._keys_per_metric[metric.name] = n + 1
            self._values[key] = value
        return True

    def inc(self, metric: sc.MetricDef, labels: Labels, amount: float = 1.0) -> None:
        key = (metric, labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def drop(self, reason: str, amount: int = 1) -> None:
        with self._lock:
            self._drop_locked(reason, amount)

    def _drop_locked(self, reason: str, amount: int = 1) -> None:
        key = (sc.OTEL_DROPPED, (reason,))
        self._values[key] = self._values.get(key, 0.0) + amount

    def observe(self, metric: sc.MetricDef, labels: Labels, value: float, trace_id: str | None = None) -> None:
        key = (metric, labels)
        with self._lock:
            series = self._hist.get(key)
            if series is None:
                series = self._hist[key] = HistogramSeries(metric.buckets, [0] * (len(metric.buckets) + 1))
            series.observe(value, trace_id)
        for hook in self.on_histogram:
            try:
                hook(metric, labels, value, trace_id)
            except Exception as exc:  # noqa: BLE001
                warn_once("hist-hook", f"histogram export failed: {exc!r}")

    def declare(self, metric: sc.MetricDef, labels: Labels) -> None:
        """A histogram series at count 0 before its first observation: a counter that appears with its first
        burst already in it (12 failed calls in one scrape) shows no increase() to Prometheus."""
        with self._lock:
            if (metric, labels) not in self._hist:
                self._hist[metric, labels] = HistogramSeries(metric.buckets, [0] * (len(metric.buckets) + 1))

    def add_source(self, source: Source) -> None:
        """Register a callback producing live readings at read time (e.g. rollout progress)."""
        with self._lock:
            self._sources.append(source)

    # -- readers --------------------------------------------------------------------------------
    def readings(self) -> list[Reading]:
        with self._lock:
            out: list[Reading] = [(m, labels, v) for (m, labels), v in self._values.items()]
            sources = list(self._sources)
        for source in sources:
            try:
                out.extend(source())
            except Exception as exc:  # noqa: BLE001
                warn_once(f"source:{source!r}", f"metric source failed: {exc!r}")
        return out

    def exported(self) -> list[Reading]:
        """The readings as both exporters write them: a renamed label also under its old name (CHANGELOG.md)."""
        out = self.readings()
        return _with_old_names(out) if self.deprecated_names else out

    def histograms(self) -> list[tuple[sc.MetricDef, Labels, HistogramSeries]]:
        with self._lock:
            return [
                (m, labels, HistogramSeries(s.bounds, list(s.counts), s.total, s.count, dict(s.exemplars)))
                for (m, labels), s in self._hist.items()
            ]


def _with_old_names(readings: list[Reading]) -> list[Reading]:
    """Readings of a metric with a renamed label, as one series carrying the old label name beside the new one
    (both exporters read readings, so both export it); read-time only, never on a training thread's path."""
    out: list[Reading] = []
    for metric, labels, value in readings:
        if metric.renamed:
            twin, index = sc.with_deprecated_labels(metric)
            out.append((twin, labels + tuple(labels[i] for i in index), value))
        else:
            out.append((metric, labels, value))
    return out
