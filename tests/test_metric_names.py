"""Metric names are a user-facing API. That each comes out exactly as documented through the OTel Collector's
prometheus exporter is checked on the real Collector (tests/test_e2e_real_stack.py, which compares the names and
labels Prometheus scraped from it with semconv); here, what holds for every name."""

from verl_otel import semconv as sc


def test_no_label_carries_an_identity():
    forbidden = {"step", "global_step", "sample", "sample_index", "uid", "trace_id", "request_id", "pid"}
    for metric in sc.METRICS:
        assert not forbidden & set(metric.labels), metric.name


def test_names_are_prefixed_and_unique():
    names = [m.name for m in sc.METRICS]
    assert len(set(names)) == len(names)
    assert all(n.startswith("verl_") for n in names)
