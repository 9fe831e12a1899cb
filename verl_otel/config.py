"""Settings from the environment: our VERL_OTEL_* knobs, the seed's VERL_PROGRESS_* knobs and the
standard OTEL_* variables. A bad value never raises: it logs one clear line and uses the default."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from verl_otel import semconv as sc
from verl_otel._log import warn_once

_FALSY = {"", "0", "false", "no", "off"}
_TRUTHY = {"1", "true", "yes", "on"}


def flag(name: str, default: bool, env: dict[str, str]) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    val = raw.strip().lower()
    if val in _TRUTHY:
        return True
    if val in _FALSY:
        return False
    warn_once(f"flag:{name}", f"{name}={raw!r} is not a boolean (use 1/0); using {int(default)}")
    return default


def number(name: str, default: float, env: dict[str, str], *, minimum: float | None = None) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        val = float(raw)
    except ValueError:
        warn_once(f"num:{name}", f"{name}={raw!r} is not a number; using {default:g}")
        return default
    if val != val or (minimum is not None and val < minimum):  # NaN or below range
        warn_once(f"num:{name}", f"{name}={raw!r} is out of range; using {default:g}")
        return default
    return val


def enabled(env: dict[str, str] | None = None) -> bool:
    """Is instrumentation switched on for this process?

    On with VERL_OTEL_ENABLED=1 or an OTLP endpoint; VERL_OTEL_ENABLED=0 and OTEL_SDK_DISABLED=true win.
    """
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    raw = env.get(sc.ENV_ENABLED)
    if raw is not None and raw.strip() != "":
        return flag(sc.ENV_ENABLED, False, env)
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def _endpoint(env: dict[str, str], *names: str) -> str | None:
    for name in names:
        raw = env.get(name, "").strip()
        if not raw:
            continue
        parsed = urlparse(raw if "://" in raw else f"http://{raw}")
        if parsed.scheme not in ("http", "https", "grpc") or not parsed.hostname:
            warn_once(f"endpoint:{name}", f"{name}={raw!r} is not a valid URL (e.g. http://localhost:4317); "
                      "OTLP export is off, the local trace file is used instead")
            return None
        try:
            parsed.port  # noqa: B018  (raises on a non-numeric port)
        except ValueError:
            warn_once(f"endpoint:{name}", f"{name}={raw!r} has an invalid port; OTLP export is off")
            return None
        return raw
    return None


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    traces_endpoint: str | None
    metrics_endpoint: str | None
    protocol: str  # "grpc" | "http/protobuf"
    metric_export_interval_ms: int
    prometheus_port: int | None  # None: no /metrics server
    prometheus_host: str
    sample_spans: int
    capture_text: bool
    max_text: int
    max_metric_keys: int
    console: bool

    @property
    def embedded(self) -> bool:
        """No backend configured: local trace file and local /metrics."""
        return self.traces_endpoint is None


def load(env: dict[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    traces_ep = _endpoint(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    metrics_ep = _endpoint(env, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc").strip().lower() or "grpc"
    if protocol not in ("grpc", "http/protobuf"):
        warn_once("protocol", f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported "
                  "(grpc or http/protobuf); using grpc")
        protocol = "grpc"
    prom_raw = env.get(sc.ENV_PROM_PORT)
    prom_port: int | None
    if prom_raw is None or prom_raw.strip() == "":
        prom_port = 0 if traces_ep is None else None  # embedded default: pull is on
    else:
        prom_port = int(number(sc.ENV_PROM_PORT, 0, env, minimum=0))
        if prom_port > 65535:
            warn_once("promport", f"{sc.ENV_PROM_PORT}={prom_raw!r} is not a port; using any free port")
            prom_port = 0
    return Settings(
        data_dir=Path(env.get(sc.ENV_DIR) or "./verl-otel-data").absolute(),
        traces_endpoint=traces_ep,
        metrics_endpoint=metrics_ep,
        protocol=protocol,
        metric_export_interval_ms=int(number("OTEL_METRIC_EXPORT_INTERVAL", 5000, env, minimum=100)),
        prometheus_port=prom_port,
        prometheus_host=env.get(sc.ENV_PROM_HOST, "127.0.0.1").strip() or "127.0.0.1",
        sample_spans=int(number(sc.ENV_SAMPLE_SPANS, 8, env, minimum=0)),
        capture_text=flag(sc.ENV_CAPTURE_TEXT, False, env),
        max_text=int(number(sc.ENV_MAX_TEXT, 2000, env, minimum=0)),
        max_metric_keys=int(number(sc.ENV_MAX_METRIC_KEYS, 2000, env, minimum=1)),
        console=flag(sc.ENV_CONSOLE, True, env),
    )


@dataclass(frozen=True)
class ProgressSettings:
    """The seed's console progress knobs (VERL_PROGRESS_*, VERL_ROLLOUT_PROGRESS_*), same defaults."""

    enabled: bool
    log_interval: int  # print a step's lines only when step % interval == 0
    bar_interval: int  # actor update bar every N mini-batches
    heartbeat_s: float  # "still running" line for a long phase
    meta_preview: int  # meta keys shown on the rollout start line
    rollout_interval: int  # rollout bar every N finished samples
    rollout_worker_index: int  # which agent-loop worker prints its bar; -1 = all
    rollout_bar_width: int

    def step_selected(self, step: int) -> bool:
        return self.enabled and (step < 0 or step % self.log_interval == 0)


def load_progress(env: dict[str, str] | None = None) -> ProgressSettings:
    env = os.environ if env is None else env
    return ProgressSettings(
        enabled=flag(sc.ENV_PROGRESS_LOG, False, env),
        log_interval=int(number(sc.ENV_PROGRESS_LOG_INTERVAL, 1, env, minimum=1)),
        bar_interval=int(number(sc.ENV_PROGRESS_BAR_INTERVAL, 1, env, minimum=1)),
        heartbeat_s=number(sc.ENV_PROGRESS_HEARTBEAT_SEC, 5.0, env, minimum=0.1),
        meta_preview=int(number(sc.ENV_PROGRESS_LOG_META_PREVIEW, 6, env, minimum=0)),
        rollout_interval=int(number(sc.ENV_ROLLOUT_PROGRESS_INTERVAL, 1, env, minimum=1)),
        rollout_worker_index=int(number(sc.ENV_ROLLOUT_PROGRESS_WORKER_INDEX, 0, env, minimum=-1)),
        rollout_bar_width=int(number(sc.ENV_ROLLOUT_PROGRESS_BAR_WIDTH, 24, env, minimum=1)),
    )
