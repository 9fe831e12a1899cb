"""Sending one already-encoded OTLP trace request (ExportTraceServiceRequest bytes) over gRPC or HTTP, once,
and saying what the endpoint answered: delivered, worth retrying, or refused for good.

Our own transport rather than the SDK exporter's: the SDK's retries (and, past its timeout, drops) the batch
inside ``export``, and its internals differ between the releases we support. Retrying is the caller's
(:mod:`verl_otel.export.span_buffer`). The OTLP specification's retryable answers: gRPC UNAVAILABLE,
DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED (with a RetryInfo delay), CANCELLED, ABORTED, OUT_OF_RANGE, DATA_LOSS;
HTTP 429, 502, 503, 504 (with Retry-After); a connection refused or reset. Anything else is permanent.
"""

from __future__ import annotations

import contextlib
import gzip
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

GRPC_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
HTTP_TRACES_PATH = "/v1/traces"
OK, RETRY, PERMANENT = "ok", "retry", "permanent"
_GRPC_RETRYABLE = frozenset(
    ("UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "CANCELLED", "ABORTED", "OUT_OF_RANGE", "DATA_LOSS")
)
_HTTP_RETRYABLE = frozenset((408, 429, 502, 503, 504))


@dataclass(frozen=True)
class Outcome:
    kind: str  # OK | RETRY | PERMANENT
    reason: str = ""  # "UNAVAILABLE", "http_503", "connection": short, for counting and the log
    detail: str = ""  # the endpoint's own words
    retry_after_s: float | None = None  # the endpoint's requested delay
    rejected: int = 0  # spans a partial success refused


def _env(env: Mapping[str, str], *names: str) -> str:
    for name in names:
        val = env.get(name, "").strip()
        if val:
            return val
    return ""


def _headers(env: Mapping[str, str]) -> dict[str, str]:
    raw = _env(env, "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
    if not raw:
        return {}
    from opentelemetry.util.re import parse_env_headers

    return {k.lower(): v for k, v in parse_env_headers(raw, liberal=True).items()}


def _read(path: str) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


def _partial(resp: Any) -> Outcome:
    partial = getattr(resp, "partial_success", None)
    rejected = int(getattr(partial, "rejected_spans", 0) or 0)
    if rejected:
        return Outcome(OK, "partial_success", str(getattr(partial, "error_message", "")), rejected=rejected)
    return Outcome(OK)


class GrpcSender:
    """One channel, reopened after UNAVAILABLE so a restarted collector is reached at once (not after
    gRPC's reconnect backoff, which grows to two minutes)."""

    def __init__(self, endpoint: str, timeout_s: float, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        parsed = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
        self.endpoint = endpoint
        self._target = parsed.netloc or endpoint
        insecure_env = _env(env, "OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE").lower()
        self._insecure = parsed.scheme != "https" and (parsed.scheme == "http" or insecure_env == "true")
        self._cert = _env(env, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE")
        self._client_key = _env(env, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY")
        self._client_cert = _env(
            env, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
        )
        self._gzip = _env(env, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION") == "gzip"
        self._metadata = tuple(_headers(env).items())
        self._timeout_s = timeout_s
        self._channel: Any = None
        self._call: Any = None

    def _open(self) -> Any:
        import grpc
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        compression = grpc.Compression.Gzip if self._gzip else None
        if self._insecure:
            self._channel = grpc.insecure_channel(self._target, compression=compression)
        else:
            creds = grpc.ssl_channel_credentials(_read(self._cert), _read(self._client_key), _read(self._client_cert))
            self._channel = grpc.secure_channel(self._target, creds, compression=compression)
        # no request serializer: the request is already bytes (encoded once, when the batch was taken)
        self._call = self._channel.unary_unary(
            GRPC_METHOD, request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString
        )
        return self._call

    def send(self, data: bytes) -> Outcome:
        import grpc

        call = self._call or self._open()
        try:
            resp = call(data, timeout=self._timeout_s, metadata=self._metadata)
        except grpc.RpcError as err:
            code = err.code() if hasattr(err, "code") else None
            name = getattr(code, "name", "UNKNOWN")
            detail = str(err.details() if hasattr(err, "details") else err)
            if name == "UNAVAILABLE":
                self.close()  # a fresh channel connects at the next try
            if name in _GRPC_RETRYABLE:
                return Outcome(RETRY, name, detail, _retry_info(err))
            return Outcome(PERMANENT, name, detail)
        return _partial(resp)

    def close(self) -> None:
        channel, self._channel, self._call = self._channel, None, None
        if channel is not None:
            with contextlib.suppress(Exception):  # a channel that fails to close is dropped all the same
                channel.close()


def _retry_info(err: Any) -> float | None:
    try:
        from google.rpc.error_details_pb2 import RetryInfo

        raw = dict(err.trailing_metadata() or ()).get("google.rpc.retryinfo-bin")
        if raw is None:
            return None
        info = RetryInfo.FromString(raw)
        return float(info.retry_delay.seconds + info.retry_delay.nanos / 1e9)
    except Exception:  # noqa: BLE001 - no usable delay: our own backoff
        return None


class HttpSender:
    def __init__(self, url: str, timeout_s: float, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.endpoint = url
        self._timeout_s = timeout_s
        self._headers = {"Content-Type": "application/x-protobuf", **_headers(env)}
        self._gzip = _env(env, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION") == "gzip"
        if self._gzip:
            self._headers["Content-Encoding"] = "gzip"
        cert = _env(env, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE")
        key = _env(env, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY")
        ccert = _env(env, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")
        self._verify: Any = cert or True
        self._cert: Any = (ccert, key) if ccert and key else (ccert or None)
        self._session: Any = None

    def send(self, data: bytes) -> Outcome:
        import requests
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        if self._session is None:
            self._session = requests.Session()
        body = gzip.compress(data) if self._gzip else data
        try:
            resp = self._session.post(
                self.endpoint,
                data=body,
                headers=self._headers,
                timeout=self._timeout_s,
                verify=self._verify,
                cert=self._cert,
            )
        except requests.RequestException as exc:  # refused, reset, timed out: the endpoint is not there now
            self.close()
            return Outcome(RETRY, "connection", type(exc).__name__)
        if 200 <= resp.status_code < 300:
            try:
                return _partial(ExportTraceServiceResponse.FromString(resp.content or b""))
            except Exception:  # noqa: BLE001 - delivered; an odd body says nothing about the spans
                return Outcome(OK)
        detail = (resp.text or "")[:300]
        if resp.status_code in _HTTP_RETRYABLE:
            return Outcome(RETRY, f"http_{resp.status_code}", detail, _retry_after(resp.headers.get("Retry-After")))
        return Outcome(PERMANENT, f"http_{resp.status_code}", detail)

    def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()


def _retry_after(raw: str | None) -> float | None:
    try:
        return max(0.0, float(raw)) if raw else None
    except ValueError:  # an HTTP date: our own backoff
        return None


Sender = GrpcSender | HttpSender


def http_traces_url(endpoint: str, signal_specific: bool) -> str:
    """OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is used as given; the generic endpoint gets /v1/traces."""
    if signal_specific:
        return endpoint
    return endpoint.rstrip("/") + HTTP_TRACES_PATH


def make_sender(
    endpoint: str, protocol: str, timeout_s: float, signal_specific: bool, env: Mapping[str, str] | None = None
) -> Sender:
    if protocol == "http/protobuf":
        return HttpSender(http_traces_url(endpoint, signal_specific), timeout_s, env)
    return GrpcSender(endpoint, timeout_s, env)
