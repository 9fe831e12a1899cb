"""The one parser of environment values, shared by the start-up line (``verl_otel_autoload.pth``, which
runs in every Python process of the venv, so this module imports nothing but ``os`` and ``math``) and
by :mod:`verl_otel.config`. Each function returns ``None`` for a value it cannot read; the caller
decides the default and says so."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, MutableMapping

TRUTHY = frozenset({"1", "true", "yes", "on"})
FALSY = frozenset({"", "0", "false", "no", "off"})

ENABLED = "VERL_OTEL_ENABLED"
PROGRESS_LOG = "VERL_PROGRESS_LOG"
SDK_DISABLED = "OTEL_SDK_DISABLED"
OTLP_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
# vLLM exports OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=<its otlp_traces_endpoint> into its environment when its
# tracing is on, for its own child processes; a rollout server that knows says which value that is here
# (semconv.ENV_ENGINE_ENDPOINT), so neither it nor its children take vLLM's endpoint for the user's collector
ENGINE_ENDPOINT = "VERL_OTEL_ENGINE_ENDPOINT"
# the driver's OTEL_* variables as one JSON object, set on ray.init (hooks/ray_env.py; semconv.ENV_JOB_OTEL): they
# apply in a process verl-otel instruments, never in another (RL-Insight's hub keeps its own OTel settings)
JOB_OTEL = "VERL_OTEL_JOB_OTEL"
LOG_LEVEL = "VERL_OTEL_LOG_LEVEL"  # read by _log.py before any settings exist; config.load names a bad value
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

# what a process does: nothing, the [VERL_PROGRESS] console lines only, or telemetry (with the console lines if asked)
MODE_OFF = "off"
MODE_CONSOLE = "console"
MODE_TELEMETRY = "telemetry"


def parse_flag(raw: str) -> bool | None:
    val = raw.strip().lower()
    if val in TRUTHY:
        return True
    if val in FALSY:
        return False
    return None


def parse_number(raw: str) -> float | None:
    """A finite float, else None (``inf``, ``1e999`` and ``nan`` are not numbers a setting can use)."""
    try:
        val = float(raw.strip())
    except (ValueError, AttributeError):
        return None
    return val if math.isfinite(val) else None


def log_level(env: Mapping[str, str] | None = None) -> str:
    """VERL_OTEL_LOG_LEVEL as a :mod:`logging` level name; ``INFO`` for a value that names none."""
    name = (os.environ if env is None else env).get(LOG_LEVEL, "INFO").strip().upper()
    return name if name in LOG_LEVELS else "INFO"


def otlp_endpoint(env: Mapping[str, str], name: str) -> str:
    """The user's value of an OTLP endpoint variable ('' when unset, or when it is vLLM's own, see above)."""
    raw = env.get(name, "")
    if name == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" and raw and raw == env.get(ENGINE_ENDPOINT):
        return ""
    return raw


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """Is instrumentation switched on for this process?

    On with ``VERL_OTEL_ENABLED=1`` or an OTLP endpoint. ``VERL_OTEL_ENABLED`` set to anything that is
    not a true value (``0``, ``off``, ``maybe``) and ``OTEL_SDK_DISABLED=true`` win: a value we cannot
    read never switches telemetry on.
    """
    env = os.environ if env is None else env
    if parse_flag(env.get(SDK_DISABLED, "")) is True:
        return False
    raw = env.get(ENABLED)
    if raw is not None and raw.strip() != "":
        return parse_flag(raw) is True
    return any(otlp_endpoint(env, name).strip() for name in OTLP_ENDPOINTS)


def mode(env: Mapping[str, str] | None = None) -> str:
    """``telemetry`` when :func:`enabled`; else ``console`` with ``VERL_PROGRESS_LOG`` on (the [VERL_PROGRESS] switch
    on its own: hooks and console lines, no trace file, no port, no exporter); else ``off``."""
    env = os.environ if env is None else env
    if enabled(env):
        return MODE_TELEMETRY
    if parse_flag(env.get(PROGRESS_LOG, "")) is True:
        return MODE_CONSOLE
    return MODE_OFF


def job_otel(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The OTEL_* variables the driver carried in ``VERL_OTEL_JOB_OTEL`` ({} when none or unreadable)."""
    raw = (os.environ if env is None else env).get(JOB_OTEL, "")
    if not raw.strip():
        return {}
    import json  # only where a job carries them: the start-up hook of every other process stays light

    try:
        carried = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(carried, dict):
        return {}
    return {k: v for k, v in carried.items() if isinstance(k, str) and k.startswith("OTEL_") and isinstance(v, str)}


def with_job_otel(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` as a process verl-otel instruments sees it: its own values, then what the driver carried."""
    env = os.environ if env is None else env
    return {**job_otel(env), **env}


def apply_job_otel(env: MutableMapping[str, str] | None = None) -> None:
    """Put the carried OTEL_* variables where the SDK reads them, in this process only (its runtime is being
    made: verl-otel instruments it); a value the process has of its own wins."""
    env = os.environ if env is None else env
    for key, val in job_otel(env).items():
        env.setdefault(key, val)
