"""Settings from the environment: our VERL_OTEL_* knobs, the VERL_PROGRESS_* knobs
(docs/guides/console.md) and the standard OTEL_* variables the OpenTelemetry SDK reads. Reading is total: any string
gives either its value or one line naming the variable and the default used (collected in
``Settings.problems`` and logged once).

OTEL_* variables are read by the SDK itself, deep inside constructors that raise on values they reject
(``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` above the queue size, a compression name it does not know, a span
limit that is not an integer). :func:`sanitize_otel_env` checks each one first and replaces a bad value
in this process' environment with the SDK's default, so no SDK constructor ever sees it.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from verl_otel import _env
from verl_otel import semconv as sc
from verl_otel._env import apply_job_otel
from verl_otel._log import warn_once
from verl_otel.otel_env import OTEL_VARIABLES, sanitize_otel_env
from verl_otel.otel_env import show as _show

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


def hostname(env: Mapping[str, str] | None = None) -> str:
    """This host's name wherever a file name, label or merge key carries it (two hosts writing to one shared
    VERL_OTEL_DIR stay apart): ``VERL_OTEL_HOSTNAME`` when set (a test's simulated host, containers that share
    a name), else the machine's; only ``[A-Za-z0-9._-]``, at most 64 characters. Read at each call."""
    raw = (os.environ if env is None else env).get(sc.ENV_HOSTNAME, "").strip() or socket.gethostname()
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in raw)[:64] or "unknown-host"


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


def _is_loopback(endpoint: str) -> bool:
    host = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}").hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_elsewhere(
    driver: str, endpoints: tuple[str | None, ...], data_dir: str, here: str | None = None
) -> str | None:
    """The start-up line of a process on another host than the driver's (``driver``: VERL_OTEL_DRIVER_HOST, which
    ray.init forwards) that was forwarded the driver's loopback OTLP endpoint: there it names this host, not the
    driver's Collector. Named, not rewritten (README, multi-node)."""
    loopback = next((e for e in endpoints if e and _is_loopback(e)), None)
    if not driver or loopback is None:
        return None
    here = hostname() if here is None else here
    if driver == here:
        return None
    unsent = Path(data_dir).absolute() / sc.UNSENT_DIR
    return (
        f"OTLP endpoint {loopback} is loopback on host {here} (the driver runs on {driver}): this process sends "
        f"to this node's own Collector agent if one runs there, else its spans wait and end in {unsent}/ and its "
        "metrics are not collected — run the agent (deploy/otel-collector/agent.yaml) on every node or set a "
        "routable endpoint"
    )


@dataclass(frozen=True)
class StallSettings:
    """Stall detection (docs/guides/hangs.md): a call is stalled past
    ``min(seconds, max(min_seconds, factor x median of its earlier runs))`` (``seconds`` alone at first)."""

    enabled: bool = True
    seconds: float = 1800.0
    min_seconds: float = 120.0
    factor: float = 5.0
    repeat_s: float = 600.0  # stacks again after this many more seconds of the same stall

    def threshold(self, median_s: float | None) -> float:
        if median_s is None:
            return self.seconds
        return min(self.seconds, max(self.min_seconds, self.factor * median_s))


@dataclass(frozen=True)
class CaptureSettings:
    """Captures (docs/guides/hangs.md): a sampling profile of a stalled process, while it is stuck; bounded."""

    enabled: bool = True
    seconds: float = 5.0
    max_per_process: int = 4
    max_per_phase: int = 2
    cooldown_s: float = 60.0  # between two captures of a process
    rate_hz: int = 100
    max_bytes: int = 16 * 2**20  # a capture file past this is cut to its summary
    next_step: bool = False  # VERL_OTEL_CAPTURE_NEXT: a stall arms verl's own profiler for the next step


def _capture(r: _Reader) -> CaptureSettings:
    return CaptureSettings(
        enabled=r.flag(sc.ENV_CAPTURE, True),
        seconds=r.number(sc.ENV_CAPTURE_SECONDS, 5.0, 0.1, 600.0),
        max_per_process=r.integer(sc.ENV_CAPTURE_MAX, 4, 0, 1000),
        next_step=r.flag(sc.ENV_CAPTURE_NEXT, False),
    )


def _stall(r: _Reader) -> StallSettings:
    return StallSettings(
        enabled=r.flag(sc.ENV_STALL, True),
        seconds=r.number(sc.ENV_STALL_SECONDS, 1800.0, 0.01, 86_400.0 * 30),
        min_seconds=r.number(sc.ENV_STALL_MIN_SECONDS, 120.0, 0.01, 86_400.0 * 30),
        factor=r.number(sc.ENV_STALL_FACTOR, 5.0, 1.0, 1e6),
        repeat_s=r.number(sc.ENV_STALL_REPEAT_SECONDS, 600.0, 0.01, 86_400.0 * 30),
    )


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
    step_line: bool  # VERL_OTEL_CONSOLE: our one-line summary per step (per window on the rollouter)
    shutdown_timeout_s: float = 5.0
    max_file_bytes: int = 256 * 2**20
    max_files: int = 4
    export_buffer_bytes: int = 64 * 2**20  # spans waiting for the collector, per process (again on disk)
    process_role: str = sc.PROCESS_ROLE_OTHER
    console_only: bool = False  # VERL_PROGRESS_LOG=1 alone: the [VERL_PROGRESS] lines, no span/metric export at all
    engine_spans: bool = True  # the rollout engine's (vLLM's) request spans under our samples
    deprecated_names: bool = True  # renamed labels and attributes exported under their old name too (CHANGELOG.md)
    prometheus_host_given: bool = False  # VERL_OTEL_PROMETHEUS_HOST set: no node-IP default on a Ray worker node
    sd_port: int = 0  # VERL_OTEL_SD_PORT: the Ray driver's http_sd endpoint (0: none; the file is kept all the same)
    stall: StallSettings = field(default_factory=lambda: StallSettings())
    capture: CaptureSettings = field(default_factory=lambda: CaptureSettings())
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
        step_line=r.flag(sc.ENV_CONSOLE, not console_only),  # our step line is not one of the [VERL_PROGRESS]
        shutdown_timeout_s=r.number(sc.ENV_SHUTDOWN_TIMEOUT, 5.0, 0.0, 3600.0),
        max_file_bytes=int(r.number(sc.ENV_MAX_FILE_MB, 256.0, 0.001, 1024.0 * 1024) * 2**20),
        max_files=r.integer(sc.ENV_MAX_FILES, 4, 1, 1000),
        export_buffer_bytes=int(r.number(sc.ENV_EXPORT_BUFFER_MB, 64.0, 0.0, 1024.0 * 1024) * 2**20),
        process_role=r.text(sc.ENV_PROCESS_ROLE, sc.PROCESS_ROLE_OTHER, limit=64),
        console_only=console_only,
        engine_spans=r.flag(sc.ENV_ENGINE_SPANS, True),
        deprecated_names=r.flag(sc.ENV_DEPRECATED_NAMES, True),
        prometheus_host_given=bool((r.env.get(sc.ENV_PROM_HOST) or "").strip()),
        sd_port=r.integer(sc.ENV_SD_PORT, 0, 0, 65535),
        stall=_stall(r),
        capture=_capture(r),
    )
    r.choice(sc.ENV_LOG_LEVEL, "info", ("debug", "info", "warning", "error"))
    r.flag(sc.ENV_ENABLED, False)
    elsewhere = loopback_elsewhere(r.text(sc.ENV_DRIVER_HOST, "", limit=255), (traces_ep, metrics_ep), data_dir)
    r.text(sc.ENV_HOSTNAME, "", limit=255)  # read by hostname(): a bad value is named here once
    problems = tuple(r.problems)
    if report:
        _report(list(problems))
        if elsewhere:
            warn_once("loopback-elsewhere", elsewhere)
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


#: Our own variables and VERL_PROGRESS_*, for the totality test (each is read by load() or load_progress()).
OWN_VARIABLES: tuple[str, ...] = (
    sc.ENV_ENABLED,
    sc.ENV_DIR,
    sc.ENV_DRIVER_HOST,
    sc.ENV_PROM_PORT,
    sc.ENV_PROM_HOST,
    sc.ENV_SAMPLE_SPANS,
    sc.ENV_CAPTURE_TEXT,
    sc.ENV_MAX_TEXT,
    sc.ENV_MAX_METRIC_KEYS,
    sc.ENV_CONSOLE,
    sc.ENV_PROCESS_ROLE,
    sc.ENV_SHUTDOWN_TIMEOUT,
    sc.ENV_MAX_FILE_MB,
    sc.ENV_MAX_FILES,
    sc.ENV_EXPORT_BUFFER_MB,
    sc.ENV_LOG_LEVEL,
    sc.ENV_ENGINE_SPANS,
    sc.ENV_DEPRECATED_NAMES,
    sc.ENV_HOSTNAME,
    sc.ENV_SD_PORT,
    sc.ENV_STALL,
    sc.ENV_STALL_SECONDS,
    sc.ENV_STALL_MIN_SECONDS,
    sc.ENV_STALL_FACTOR,
    sc.ENV_STALL_REPEAT_SECONDS,
    sc.ENV_PROGRESS_LOG,
    sc.ENV_PROGRESS_LOG_INTERVAL,
    sc.ENV_PROGRESS_BAR_INTERVAL,
    sc.ENV_PROGRESS_HEARTBEAT_SEC,
    sc.ENV_PROGRESS_LOG_META_PREVIEW,
    sc.ENV_ROLLOUT_PROGRESS_INTERVAL,
    sc.ENV_ROLLOUT_PROGRESS_WORKER_INDEX,
    sc.ENV_ROLLOUT_PROGRESS_BAR_WIDTH,
)

__all__ = [
    "OTEL_VARIABLES",
    "OWN_VARIABLES",
    "ProgressSettings",
    "Settings",
    "StallSettings",
    "apply_job_otel",
    "hostname",
    "load",
    "load_progress",
    "sanitize_otel_env",
]
