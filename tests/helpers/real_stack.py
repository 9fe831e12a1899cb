"""The real stack for the e2e tests: the Collector and Jaeger that `make stack-bin` builds (built here when
missing), Prometheus and Alertmanager from Debian, started by verl_otel.native (the code behind
`verl-otel stack up --native`) on free ports. Without Go the tests skip, except under CI=true, where a missing
toolchain fails them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from helpers.procs import ROOT

from verl_otel.native.configs import BINARIES

STACK_BIN = ROOT / ".stack-bin"
GO_MODULES = {
    "otelcol-verl": ROOT / "deploy/otel-collector/build/go.mod",
    "jaeger": ROOT / "deploy/jaeger/build/go.mod",
}


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the real stack's tests must run)")
    pytest.skip(reason)


def go_binaries() -> dict[str, Path]:
    """{"collector": .., "jaeger": ..}: `deploy/stack-bin.sh` (cached: seconds) when Go is there."""
    if shutil.which("go") is None:
        _missing("no `go` on PATH: the real Collector and Jaeger cannot be built (install Go >= 1.25)")
    wanted = {"collector": STACK_BIN / "otelcol-verl", "jaeger": STACK_BIN / "jaeger"}
    # the script is cheap when cached, and re-links after a go.mod change
    proc = subprocess.run(["bash", str(ROOT / "deploy/stack-bin.sh")], capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert all(p.is_file() for p in wanted.values()), proc.stdout
    return wanted


def system_binaries() -> dict[str, Path]:
    """Prometheus and Alertmanager (`make prometheus`)."""
    found = {}
    for name in ("prometheus", "alertmanager"):
        exe = next((shutil.which(b) for b in BINARIES[name] if shutil.which(b)), None)
        if exe is None:
            _missing(f"no {name} on PATH (`make prometheus`)")
        found[name] = Path(str(exe))
    return found


def go_require(name: str, module: str) -> str:
    """The version ``module`` has in the go.mod of ``name`` (its own line or a require block's)."""
    for line in GO_MODULES[name].read_text().splitlines():
        parts = line.replace("require", "").split()
        if len(parts) >= 2 and parts[0] == module:
            return parts[1]
    raise AssertionError(f"{module} not in {GO_MODULES[name]}")


def get_json(url: str, timeout: float = 10) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def am_alerts(alertmanager_url: str) -> list[dict[str, Any]]:
    """The alerts Alertmanager holds (its v2 API), [] while it cannot be reached."""
    try:
        return list(get_json(f"{alertmanager_url}/api/v2/alerts"))
    except OSError:
        return []


def scrape(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return ""


def queued_spans(collector_telemetry_url: str) -> float:
    """The otlp/jaeger exporter's queue size now (0 when unreadable)."""
    for line in scrape(collector_telemetry_url).splitlines():
        if line.startswith("otelcol_exporter_queue_size{") and 'exporter="otlp/jaeger"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def wait_until(check: Any, timeout: float, every: float = 1.0) -> Any:
    """Poll ``check()`` until it returns something truthy; returns the last value."""
    deadline = time.monotonic() + timeout
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(every)
        value = check()
    return value
