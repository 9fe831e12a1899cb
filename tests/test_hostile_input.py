"""Bad input never raises into training: odd metric keys, non-finite and non-scalar values,
thousands of keys (a cap with one warning), broken OTEL_* values, an unwritable VERL_OTEL_DIR."""

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from verl_otel import config
from verl_otel import semconv as sc
from verl_otel.export.prometheus import StoreCollector
from verl_otel.process.metrics import MetricStore
from verl_otel.telemetry.trainer_metrics import record_training_metrics

_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.none(),
    st.text(max_size=50),
    st.booleans(),
    st.lists(st.floats(), max_size=3),
    st.builds(lambda x: torch.tensor(x), st.floats(allow_nan=True)),
    st.builds(lambda x: np.float32(x), st.floats(width=32, allow_nan=True)),
    st.builds(lambda n: torch.zeros(n), st.integers(min_value=2, max_value=4)),
)
_keys = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=300
) | st.sampled_from(["val-core/openai/gsm8k/acc/mean@1", "timing_s/gen", "a b:c-d@e/f", "分数/均值", '\\"\n'])


def _scrape(store: MetricStore) -> dict[str, float]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StoreCollector(store))
    text = generate_latest(reg).decode()
    generate_openmetrics(reg)  # the OpenMetrics rendering must not fail either
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == sc.TRAINING_METRIC.name:
                out[s.labels["key"]] = s.value
    return out


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=20))
def test_metric_path_never_raises_and_exports_exactly_the_finite_scalars(data):
    store = MetricStore()
    recorded = record_training_metrics(store, data)
    scraped = _scrape(store)
    expected = {}
    for key, val in data.items():
        try:
            f = float(val.item()) if hasattr(val, "item") else float(val) if isinstance(val, (int, float)) else None
        except (ValueError, RuntimeError, OverflowError, TypeError):
            f = None
        if f is not None and math.isfinite(f):
            expected[str(key)[:200]] = f
    assert scraped.keys() == expected.keys()
    for k, v in expected.items():
        assert scraped[k] == v or math.isclose(scraped[k], v, rel_tol=1e-12)
    dropped = sum(v for m, labels, v in store.readings() if m is sc.OTEL_DROPPED)
    assert recorded + dropped == len(data)


def test_key_cap_warns_once_and_counts(otel_log):
    store = MetricStore()
    store.max_series_per_metric = 100
    for i in range(0, 5000, 1000):
        record_training_metrics(store, {f"k{j}": 1.0 for j in range(i, i + 1000)})
    values = [s for s in store.readings() if s[0] is sc.TRAINING_METRIC]
    assert len(values) == 100
    dropped = {labels: v for m, labels, v in store.readings() if m is sc.OTEL_DROPPED}
    assert dropped[(sc.DROP_KEY_CAP,)] == 4900
    assert sum("distinct label sets" in m for m in otel_log.warnings()) == 1, otel_log.messages()


def test_broken_otel_values_fall_back_with_one_line(otel_log):
    s = config.load(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://host:notaport",
            "OTEL_METRIC_EXPORT_INTERVAL": "soon",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon",
            "VERL_OTEL_PROMETHEUS_PORT": "99999",
            "VERL_OTEL_SAMPLE_SPANS": "-3",
        }
    )
    assert s.traces_endpoint is None and s.embedded  # falls back to the local file
    assert s.metric_export_interval_ms == 5000 and s.protocol == "grpc"
    assert s.prometheus_port == 0 and s.sample_spans == 8
    text = " ".join(otel_log.messages())
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_METRIC_EXPORT_INTERVAL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "VERL_OTEL_PROMETHEUS_PORT",
        "VERL_OTEL_SAMPLE_SPANS",
    ):
        assert name in text


def test_bad_sampler_and_unwritable_dir_do_not_stop_training(drive, tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    proc = drive(
        steps=2,
        VERL_OTEL_ENABLED="1",
        VERL_OTEL_DIR=str(blocker / "sub"),
        OTEL_TRACES_SAMPLER="no-such-sampler",
        OTEL_TRACES_SAMPLER_ARG="abc",
    )
    assert proc.returncode == 0 and "DRIVE_DONE" in proc.stdout, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("cannot write traces") == 1, proc.stderr[-2000:]


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")

    def __hash__(self) -> int:
        return 1


def test_bad_keys_never_take_the_pull_path_down():
    """A lone surrogate (not valid UTF-8) and a key whose str() raises: the page still answers, the bad
    key is counted as dropped, every other metric of the step is there."""
    store = MetricStore()
    recorded = record_training_metrics(store, {"ok/a": 1.0, "bad\udcff": 2.0, _Unprintable(): 3.0, "ok/b": 4.0})
    assert recorded == 3
    scraped = _scrape(store)
    assert scraped["ok/a"] == 1.0 and scraped["ok/b"] == 4.0 and scraped["bad?"] == 2.0
    drops = {labels: v for m, labels, v in store.readings() if m is sc.OTEL_DROPPED}
    assert drops[(sc.DROP_BAD_KEY,)] == 1.0
