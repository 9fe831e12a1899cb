"""The standard OTEL_* variables the OpenTelemetry SDK reads itself, deep inside constructors that raise on
values they reject: each has a check, and :func:`sanitize_otel_env` removes a bad value from the process'
environment (the SDK then uses its default) with one line naming it, before anything reads it."""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping
from urllib.parse import unquote

from verl_otel import _env

_INT_MAX = 2**31 - 1


def show(raw: str) -> str:
    """A value as it can be logged: short, printable."""
    text = raw if len(raw) <= 60 else raw[:57] + "..."
    return ascii(text)


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
            problems.append(f"{name}={show(raw)} is not valid for the OpenTelemetry SDK; using its default")
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
