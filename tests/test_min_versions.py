"""`make test-min` runs the push-path and metric tests on the declared floors (tests/min_env.py); this checks
that the run really has them (and not the main venv's newer releases, which lie behind them on sys.path)."""

from __future__ import annotations

import importlib.metadata
import os

import pytest
from packaging.version import Version

from min_env import floors

MIN_RUN = os.environ.get("VERL_OTEL_EXPECT_MIN") == "1"


def test_floors_are_read_from_pyproject():
    got = floors()
    assert {
        "opentelemetry-api",
        "opentelemetry-sdk",
        "opentelemetry-exporter-otlp",
        "opentelemetry-instrumentation",
        "prometheus-client",
    } <= set(got), got


@pytest.mark.skipif(not MIN_RUN, reason="only in `make test-min`")
def test_this_run_has_the_declared_floors():
    import opentelemetry.sdk.trace
    import prometheus_client

    installed = {name: Version(importlib.metadata.version(name)) for name in floors()}
    assert installed == {name: Version(v) for name, v in floors().items()}
    # the modules imported are the floors' files too, not the main venv's behind them on sys.path
    for module in (opentelemetry.sdk.trace, prometheus_client):
        assert "/.venv/" not in module.__file__, module.__file__
