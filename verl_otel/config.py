"""Settings from the environment: our VERL_OTEL_* knobs, the VERL_PROGRESS_* knobs (README, Console
progress) and the standard OTEL_* variables the OpenTelemetry SDK reads. Reading is total: any string
gives either its value or one line naming the variable and the default used (collected in
``Settings.problems`` and logged once).

OTEL_* variables are read by the SDK itself, deep inside constructors that raise on values they reject
(``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` above the queue size, a compression name it does not know, a span
limit that is not an integer). :func:`sanitize_otel_env` checks each one first and replaces a bad value
in this process' environment with the SDK's default, so no SDK constructor ever sees it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from verl_otel import _env
from verl_otel import semconv as sc
from verl_otel._log import warn_once

_INT_MAX = 2**31 - 1


class _Reader:
    """Reads one environment mapping, collecting a line per bad value."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.problems: list[str] = []

    def bad(self, name: str, raw: str, default: object, why: str = "") -> None:
        self.problems.append(f"{name}={_show(raw)} {why or 'is not valid'}; using {default}")

    def flag(self, name: str, default: bool) -> bool:
        raw = self.env.get(name)
        if raw is None:
            return default
        val = _env.parse_flag(raw)
        if val is None:
            self.bad(name, raw, int(default), "is not a boolean (use 1/0)")
            return default
        return val

    def number(self, name: str, default: float, minimum: float | None = None, maximum: float | None = None) -> float:
        raw = self.env.get(name)
        if raw is None or raw.strip() == "":
            return default
        val = _env.parse_number(raw)
        if val is None:
            self.bad(name, raw, f"{default:g}", "is not a finite number")
            return default
        if (minimum is not None and val < minimum) or (maximum is not None and val > maximum):
            self.bad(name, raw, f"{default:g}", "is out of range")
            return default
        return val

    def integer(self, name: str, default: int, minimum: int = 0, maximum: int = _INT_MAX) -> int:
        return int(self.number(name, default, minimum, maximum))

    def choice(self, name: str, default: str, allowed: tuple[str, ...]) -> str:
        raw = self.env.get(name)
        if raw is None or raw.strip() == "":
            return default
        val = raw.strip().lower()
        if val not in allowed:
            self.bad(name, raw, default, f"is not one of {', '.join(allowed)}")
            return default
        return val

    def text(self, name: str, default: str, limit: int = 4096) -> str:
        raw = self.env.get(name)
        if raw is None or raw.strip() == "":
            return default
        if len(raw) > limit or not raw.isprintable():
            self.bad(name, raw, repr(default), "is not a printable string")
            return default
        return raw.strip()


def _show(raw: str) -> str:
    """A value as it can be logged: short, printable."""
    text = raw if len(raw) <= 60 else raw[:57] + "..."
    return ascii(text)


def flag(name: str, default: bool, env: Mapping[str, str]) -> bool:
    reader = _Reader(env)
    val = reader.flag(name, default)
    _report(reader.problems)
    return val


def number(name: str, default: float, env: Mapping[str, str], *, minimum: float | None = None) -> float:
    reader = _Reader(env)
    val = reader.number(name, default, minimum)
    _report(reader.problems)
    return val


def _report(problems: list[str]) -> None:
    for line in problems:
        warn_once(f"setting:{line}", line)


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """Is instrumentation switched on for this process? (the start-up line's own parser)"""
    return _env.enabled(env)


def _endpoint(r: _Reader, *names: str) -> str | None:
    for name in names:
        raw = _env.otlp_endpoint(r.env, name).strip()
        if not raw:
            continue
        try:  # urlparse raises on an unclosed "[" (IPv6), .port on a non-numeric or out-of-range port
            parsed = urlparse(raw if "://" in raw else f"http://{raw}")
            parsed.port  # noqa: B018
            port_ok = True
        except ValueError:
            parsed, port_ok = urlparse("http://"), False
        if (
            parsed.scheme not in ("http", "https", "grpc")
            or not parsed.hostname
            or not port_ok
            or not raw.isprintable()
        ):
            r.bad(
                name, raw, "the local trace file (OTLP export off)", "is not a valid URL (e.g. http://localhost:4317)"
            )
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
    shutdown_timeout_s: float = 5.0
    max_file_bytes: int = 256 * 2**20
    max_files: int = 4
    role: str = sc.ROLE_OTHER
    console_only: bool = False  # VERL_PROGRESS_LOG=1 alone: the [VERL_PROGRESS] lines, no span/metric export at all
    engine_spans: bool = True  # the rollout engine's (vLLM's) request spans under our samples
    problems: tuple[str, ...] = field(default=(), compare=False)

    @property
    def embedded(self) -> bool:
        """No backend configured: local trace file and local /metrics."""
        return self.traces_endpoint is None


def load(env: Mapping[str, str] | None = None, *, report: bool = True) -> Settings:
    r = _Reader(os.environ if env is None else env)
    traces_ep = _endpoint(r, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    metrics_ep = _endpoint(r, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    protocol = r.choice("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", ("grpc", "http/protobuf"))
    console_only = _env.mode(r.env) == _env.MODE_CONSOLE
    prom_raw = r.env.get(sc.ENV_PROM_PORT)
    prom_port: int | None
    if console_only:
        prom_port = None  # no port in console-only mode, whatever the port variable says
    elif prom_raw is None or prom_raw.strip() == "":
        prom_port = 0 if traces_ep is None else None  # embedded default: pull is on
    else:
        prom_port = r.integer(sc.ENV_PROM_PORT, 0, 0, 65535)
    data_dir = r.text(sc.ENV_DIR, "./verl-otel-data")
    settings = Settings(
        data_dir=Path(data_dir).absolute(),
        traces_endpoint=traces_ep,
        metrics_endpoint=metrics_ep,
        protocol=protocol,
        metric_export_interval_ms=r.integer("OTEL_METRIC_EXPORT_INTERVAL", 5000, 100, 86_400_000),
        prometheus_port=prom_port,
        prometheus_host=r.text(sc.ENV_PROM_HOST, "127.0.0.1", limit=255),
        sample_spans=r.integer(sc.ENV_SAMPLE_SPANS, 8, 0, 10_000),
        capture_text=r.flag(sc.ENV_CAPTURE_TEXT, False),
        max_text=r.integer(sc.ENV_MAX_TEXT, 2000, 0, 10_000_000),
        max_metric_keys=r.integer(sc.ENV_MAX_METRIC_KEYS, 2000, 1, 10_000_000),
        console=r.flag(sc.ENV_CONSOLE, not console_only),  # our step line is not one of the [VERL_PROGRESS]
        shutdown_timeout_s=r.number(sc.ENV_SHUTDOWN_TIMEOUT, 5.0, 0.0, 3600.0),
        max_file_bytes=int(r.number(sc.ENV_MAX_FILE_MB, 256.0, 0.001, 1024.0 * 1024) * 2**20),
        max_files=r.integer(sc.ENV_MAX_FILES, 4, 1, 1000),
        role=r.text(sc.ENV_ROLE, sc.ROLE_OTHER, limit=64),
        console_only=console_only,
        engine_spans=r.flag(sc.ENV_ENGINE_SPANS, True),
    )
    r.choice(sc.ENV_LOG_LEVEL, "info", ("debug", "info", "warning", "error"))
    r.flag(sc.ENV_ENABLED, False)
    problems = tuple(r.problems)
    if report:
        _report(list(problems))
    return settings.__class__(**{**settings.__dict__, "problems": problems})


@dataclass(frozen=True)
class ProgressSettings:
    """The [VERL_PROGRESS] console progress knobs (VERL_PROGRESS_*, VERL_ROLLOUT_PROGRESS_*), same defaults."""

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


def load_progress(env: Mapping[str, str] | None = None) -> ProgressSettings:
    r = _Reader(os.environ if env is None else env)
    progress = ProgressSettings(
        enabled=r.flag(sc.ENV_PROGRESS_LOG, False),
        log_interval=r.integer(sc.ENV_PROGRESS_LOG_INTERVAL, 1, 1),
        bar_interval=r.integer(sc.ENV_PROGRESS_BAR_INTERVAL, 1, 1),
        heartbeat_s=r.number(sc.ENV_PROGRESS_HEARTBEAT_SEC, 5.0, 0.1, 86_400.0),
        meta_preview=r.integer(sc.ENV_PROGRESS_LOG_META_PREVIEW, 6, 0, 1000),
        rollout_interval=r.integer(sc.ENV_ROLLOUT_PROGRESS_INTERVAL, 1, 1),
        rollout_worker_index=r.integer(sc.ENV_ROLLOUT_PROGRESS_WORKER_INDEX, 0, -1),
        rollout_bar_width=r.integer(sc.ENV_ROLLOUT_PROGRESS_BAR_WIDTH, 24, 1, 1000),
    )
    _report(r.problems)
    return progress


# -- OTEL_* variables the SDK reads itself -------------------------------------------------------------
Check = Callable[[str], bool]


def _is_int(lo: int, hi: int = _INT_MAX) -> Check:
    def check(raw: str) -> bool:
        try:
            return lo <= int(raw.strip()) <= hi
        except ValueError:
            return False

    return check


def _is_float(lo: float, hi: float) -> Check:
    def check(raw: str) -> bool:
        val = _env.parse_number(raw)
        return val is not None and lo <= val <= hi

    return check


def _one_of(*allowed: str) -> Check:
    return lambda raw: raw.strip().lower() in allowed


def _is_flag(raw: str) -> bool:
    return _env.parse_flag(raw) is not None


def _is_pairs(raw: str) -> bool:
    """``k=v,k2=v2`` (W3C baggage-like, URL-encoded values), as the SDK's headers/resource parsers want."""
    if not raw.isprintable():
        return False
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not unquote(value).isprintable():
            return False
    return True


def _is_file(raw: str) -> bool:
    return os.path.isfile(raw.strip())


def _is_text(raw: str) -> bool:
    return raw.isprintable() and len(raw) <= 1024


_POSITIVE_MS = _is_int(1, 86_400_000)
_LIMIT = _is_int(0)
_SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
_COMPRESSION = ("gzip", "deflate", "none")

#: Every OTEL_* variable the SDK (and its OTLP exporters) read for traces and metrics, with its check. A bad
#: value is removed (the SDK then uses its default), with one line naming it.
OTEL_VARIABLES: dict[str, Check] = {
    "OTEL_SDK_DISABLED": _is_flag,
    "OTEL_SERVICE_NAME": _is_text,
    "OTEL_RESOURCE_ATTRIBUTES": _is_pairs,
    "OTEL_TRACES_SAMPLER": _one_of(*_SAMPLERS),
    "OTEL_TRACES_SAMPLER_ARG": _is_float(0.0, 1.0),
    "OTEL_BSP_SCHEDULE_DELAY": _POSITIVE_MS,
    "OTEL_BSP_EXPORT_TIMEOUT": _POSITIVE_MS,
    "OTEL_BSP_MAX_QUEUE_SIZE": _is_int(1, 1_000_000),
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": _is_int(1, 1_000_000),
    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": _LIMIT,
    "OTEL_ATTRIBUTE_COUNT_LIMIT": _LIMIT,
    "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": _LIMIT,
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": _LIMIT,
    "OTEL_SPAN_EVENT_COUNT_LIMIT": _LIMIT,
    "OTEL_SPAN_LINK_COUNT_LIMIT": _LIMIT,
    "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT": _LIMIT,
    "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT": _LIMIT,
    "OTEL_METRIC_EXPORT_INTERVAL": _is_int(100, 86_400_000),
    "OTEL_METRIC_EXPORT_TIMEOUT": _POSITIVE_MS,
    "OTEL_METRICS_EXEMPLAR_FILTER": _one_of("trace_based", "always_on", "always_off"),
    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": _one_of("cumulative", "delta", "lowmemory"),
    "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION": _one_of(
        "explicit_bucket_histogram", "base2_exponential_bucket_histogram"
    ),
}
for _signal in ("", "_TRACES", "_METRICS"):
    OTEL_VARIABLES.update(
        {
            f"OTEL_EXPORTER_OTLP{_signal}_ENDPOINT": lambda raw: True,  # checked by load(): bad means file export
            f"OTEL_EXPORTER_OTLP{_signal}_PROTOCOL": _one_of("grpc", "http/protobuf"),
            f"OTEL_EXPORTER_OTLP{_signal}_TIMEOUT": _is_float(0.001, 86_400.0),
            f"OTEL_EXPORTER_OTLP{_signal}_HEADERS": _is_pairs,
            f"OTEL_EXPORTER_OTLP{_signal}_COMPRESSION": _one_of(*_COMPRESSION),
            f"OTEL_EXPORTER_OTLP{_signal}_INSECURE": _is_flag,
            f"OTEL_EXPORTER_OTLP{_signal}_CERTIFICATE": _is_file,
            f"OTEL_EXPORTER_OTLP{_signal}_CLIENT_KEY": _is_file,
            f"OTEL_EXPORTER_OTLP{_signal}_CLIENT_CERTIFICATE": _is_file,
        }
    )


def sanitize_otel_env(env: MutableMapping[str, str] | None = None) -> list[str]:
    """Remove OTEL_* values the SDK would reject (or crash on) from ``env``; one line for each."""
    env = os.environ if env is None else env
    problems: list[str] = []
    for name, check in OTEL_VARIABLES.items():
        raw = env.get(name)
        if raw is None or raw.strip() == "":
            continue
        try:
            ok = check(raw)
        except Exception:  # noqa: BLE001 - a check that cannot read the value rejects it
            ok = False
        if not ok:
            problems.append(f"{name}={_show(raw)} is not valid for the OpenTelemetry SDK; using its default")
            env.pop(name, None)
    # blank values passed the checks above untouched: they mean the SDK's defaults
    queue = int((env.get("OTEL_BSP_MAX_QUEUE_SIZE") or "").strip() or 2048)
    batch_raw = (env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") or "").strip()
    batch = int(batch_raw or 512)
    if queue < batch:  # the SDK raises on batch > queue; the line names the variable that was set
        if batch_raw:
            problems.append(
                f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE={batch} is larger than OTEL_BSP_MAX_QUEUE_SIZE={queue}; using {queue}"
            )
        else:
            problems.append(
                f"OTEL_BSP_MAX_QUEUE_SIZE={queue} is smaller than the default export batch size "
                f"{batch}; using a batch size of {queue}"
            )
        env["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"] = str(queue)
    return problems


#: Our own variables and VERL_PROGRESS_*, for the totality test (each is read by load() or load_progress()).
OWN_VARIABLES: tuple[str, ...] = (
    sc.ENV_ENABLED,
    sc.ENV_DIR,
    sc.ENV_PROM_PORT,
    sc.ENV_PROM_HOST,
    sc.ENV_SAMPLE_SPANS,
    sc.ENV_CAPTURE_TEXT,
    sc.ENV_MAX_TEXT,
    sc.ENV_MAX_METRIC_KEYS,
    sc.ENV_CONSOLE,
    sc.ENV_ROLE,
    sc.ENV_SHUTDOWN_TIMEOUT,
    sc.ENV_MAX_FILE_MB,
    sc.ENV_MAX_FILES,
    sc.ENV_LOG_LEVEL,
    sc.ENV_ENGINE_SPANS,
    sc.ENV_PROGRESS_LOG,
    sc.ENV_PROGRESS_LOG_INTERVAL,
    sc.ENV_PROGRESS_BAR_INTERVAL,
    sc.ENV_PROGRESS_HEARTBEAT_SEC,
    sc.ENV_PROGRESS_LOG_META_PREVIEW,
    sc.ENV_ROLLOUT_PROGRESS_INTERVAL,
    sc.ENV_ROLLOUT_PROGRESS_WORKER_INDEX,
    sc.ENV_ROLLOUT_PROGRESS_BAR_WIDTH,
)
