"""Metric names are a user-facing API: each must come out exactly as documented through the OTel
Collector's prometheus exporter. The translation below follows the OpenTelemetry spec's
"Prometheus and OpenMetrics Compatibility" rules (OTLP -> Prometheus metric metadata):
invalid characters become `_`; the unit is converted (`s` -> `seconds`, `By` -> `bytes`,
`{...}` annotations dropped, `1` -> `ratio` for gauges) and appended as a suffix unless the name
already ends with it; monotonic counters get `_total`."""

import re

import pytest

from verl_otel import semconv as sc

_UNITS = {
    "s": "seconds",
    "ms": "milliseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "min": "minutes",
    "h": "hours",
    "d": "days",
    "%": "percent",
}


def otlp_to_prometheus(name: str, unit: str, kind: str) -> str:
    out = re.sub(r"[^a-zA-Z0-9_:]", "_", name)
    out = re.sub(r"__+", "_", out)
    unit = re.sub(r"\{[^}]*\}", "", unit or "")
    if unit == "1" and kind == "gauge":
        suffix = "ratio"
    elif "/" in unit:
        num, per = unit.split("/", 1)
        suffix = "_".join(p for p in (_UNITS.get(num, num), "per_" + _UNITS.get(per, per) if per else "") if p)
    else:
        suffix = _UNITS.get(unit, unit)
    if suffix and not out.endswith("_" + suffix):
        out = f"{out}_{suffix}"
    if kind == "counter" and not out.endswith("_total"):
        out += "_total"
    return out


@pytest.mark.parametrize("metric", sc.METRICS, ids=lambda m: m.name)
def test_collector_translation_gives_documented_name(metric):
    assert otlp_to_prometheus(metric.otel_name, metric.unit, metric.kind) == metric.name


def test_translation_rules_themselves():
    assert otlp_to_prometheus("x.latency", "ms", "histogram") == "x_latency_milliseconds"
    assert otlp_to_prometheus("requests", "{request}", "counter") == "requests_total"
    assert otlp_to_prometheus("util", "1", "gauge") == "util_ratio"


def test_no_label_carries_an_identity():
    forbidden = {"step", "global_step", "sample", "sample_index", "uid", "trace_id", "request_id", "pid"}
    for metric in sc.METRICS:
        assert not forbidden & set(metric.labels), metric.name


def test_names_are_prefixed_and_unique():
    names = [m.name for m in sc.METRICS]
    assert len(set(names)) == len(names)
    assert all(n.startswith("verl_") for n in names)
