"""Jaeger query client (urllib only): the stable ``/api/v3`` API (Jaeger 2.x), falling back to the
legacy ``/api/traces`` API (Jaeger 1.x, and 2.x up to 2.20) when v3 is not there. Every failure is
one :class:`JaegerError` with a one-line message."""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, Literal

from verl_otel import semconv as sc
from verl_otel.analysis.otlp_json import MALFORMED, MalformedError, hex_id, parse_request
from verl_otel.analysis.step_traces import Event, Span

DEFAULT_UI: str = "http://localhost:16686"
DEFAULT_LIMIT: int = 1000
_EMPTY_404 = ("no traces found", "trace not found")  # Jaeger's 404 bodies for "nothing matched"


class JaegerError(Exception):
    """Jaeger unreachable, or it answered something we cannot read."""


class _RouteMissingError(Exception):
    """This Jaeger has no such API (404 page, or the UI's HTML catch-all)."""


def trace_link(ui_base: str, trace_id: str) -> str:
    """The Jaeger UI page of a trace."""
    return f"{ui_base.rstrip('/')}/trace/{trace_id}"


def normalize_base(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", url) else f"http://{url}"


def rfc3339(ns: int) -> str:
    sec, frac = divmod(max(0, ns), 10**9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)) + f".{frac:09d}Z"


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _decode(body: bytes) -> list[Any]:
    """JSON documents of a body: one, or several in a row (a streamed grpc-gateway answer)."""
    text = body.decode("utf-8")
    try:
        return [json.loads(text)]
    except json.JSONDecodeError as err:
        if err.msg != "Extra data":
            raise
    docs, pos, dec = [], 0, json.JSONDecoder()
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos < len(text):
            doc, pos = dec.raw_decode(text, pos)
            docs.append(doc)
    return docs


class JaegerClient:
    def __init__(self, base_url: str, timeout_s: float = 30.0) -> None:
        self.base = normalize_base(base_url)
        self.timeout_s = timeout_s
        self.api: Literal["v3", "legacy"] | None = None  # the API that answered last
        self.last_bytes = 0  # the size of the last answer's body (a paged reader sizes its pages by it)
        self.largest_bytes = 0  # of every answer this client got

    # -- public ----------------------------------------------------------------------------
    def find_traces(
        self, service: str, start_ns: int, end_ns: int, operation: str = sc.SPAN_STEP, limit: int = DEFAULT_LIMIT
    ) -> list[Span]:
        """Every span of the traces holding an ``operation`` span of ``service`` started in the window."""
        v3 = {
            "query.service_name": service,
            "query.operation_name": operation,
            "query.start_time_min": rfc3339(start_ns),
            "query.start_time_max": rfc3339(end_ns),
            "query.num_traces": limit,
        }
        legacy = {
            "service": service,
            "operation": operation,
            "start": start_ns // 1000,
            "end": -(-end_ns // 1000),  # rounded up: the legacy API's µs must not cut off the window's end
            "limit": limit,
        }
        return self._either(("/api/v3/traces", v3), ("/api/traces", legacy))

    def find_steps(self, service: str, start_ns: int, end_ns: int, limit: int = DEFAULT_LIMIT) -> list[Span]:
        return self.find_traces(service, start_ns, end_ns, sc.SPAN_STEP, limit)

    def get_trace(self, trace_id: str) -> list[Span]:
        """Every span of one trace; [] when Jaeger does not have it."""
        tid = urllib.parse.quote(trace_id.strip().lower(), safe="")
        return self._either((f"/api/v3/traces/{tid}", {}), (f"/api/traces/{tid}", {}))

    # -- internals -------------------------------------------------------------------------
    def _either(self, v3: tuple[str, dict[str, Any]], legacy: tuple[str, dict[str, Any]]) -> list[Span]:
        if self.api != "legacy":  # once v3 was missing, a paged reading asks the legacy API only
            try:
                docs = self._get(*v3)
                self.api = "v3"
                return self._parse(v3[0], docs, _v3_spans)
            except _RouteMissingError:
                pass
        try:
            docs = self._get(*legacy)
        except _RouteMissingError:
            raise JaegerError(
                f"{self.base} has neither Jaeger's /api/v3 nor its /api/traces query API "
                "(is this the Jaeger query/UI address, port 16686?)"
            ) from None
        self.api = "legacy"
        return self._parse(legacy[0], docs, _legacy_spans)

    def _parse(self, path: str, docs: list[Any], parse: Callable[[Any], list[Span]]) -> list[Span]:
        try:
            return [span for doc in docs for span in parse(doc)]
        except JaegerError:
            raise
        except MALFORMED as err:
            raise JaegerError(
                f"unexpected answer from {self.base}{path}: {type(err).__name__}: {_one_line(str(err))}"
            ) from None

    def _get(self, path: str, params: dict[str, Any]) -> list[Any]:
        """The JSON documents of a GET; [] for Jaeger's "nothing found" 404s."""
        url = f"{self.base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                body = resp.read()
                ctype = resp.headers.get("Content-Type", "")
            self.last_bytes = len(body)
            self.largest_bytes = max(self.largest_bytes, len(body))
        except urllib.error.HTTPError as err:
            text = err.read().decode("utf-8", "replace")
            if err.code == 404:
                if any(marker in text.lower() for marker in _EMPTY_404):
                    return []
                raise _RouteMissingError() from None
            raise JaegerError(
                f"Jaeger at {self.base} answered HTTP {err.code} for {path}: {_one_line(text) or err.reason}"
            ) from None
        except urllib.error.URLError as err:
            raise JaegerError(f"cannot reach Jaeger at {self.base}: {_reason(err.reason)}") from None
        except (OSError, http.client.HTTPException) as err:  # timeouts, resets, broken HTTP
            raise JaegerError(f"cannot reach Jaeger at {self.base}: {_reason(err)}") from None
        except ValueError as err:  # a URL urllib cannot use
            raise JaegerError(f"bad Jaeger URL {self.base!r}: {err}") from None
        if ctype.lower().startswith("text/html"):
            raise _RouteMissingError()  # Jaeger's UI answers unknown paths with its index.html
        try:
            return _decode(body)
        except (ValueError, RecursionError):
            raise JaegerError(
                f"Jaeger at {self.base} answered something that is not JSON for {path}: "
                f"{_one_line(body[:80].decode('utf-8', 'replace'))!r}"
            ) from None


def _reason(err: Any) -> str:
    if isinstance(err, TimeoutError) or "timed out" in str(err):
        return "timed out"
    return getattr(err, "strerror", None) or str(err) or type(err).__name__


def _v3_spans(doc: Any) -> list[Span]:
    if isinstance(doc, dict) and "error" in doc and "result" not in doc:
        detail = doc["error"].get("message") if isinstance(doc["error"], dict) else doc["error"]
        raise JaegerError(f"Jaeger answered an error: {_one_line(str(detail))}")
    return parse_request(doc)


def _legacy_spans(doc: Any) -> list[Span]:
    if not isinstance(doc, dict):
        raise MalformedError(f"expected an object, got {type(doc).__name__}")
    return [span for trace in doc.get("data") or [] for span in legacy_trace(trace)]


def legacy_trace(trace: dict[str, Any]) -> list[Span]:
    """The spans of one trace of the legacy API: µs times, CHILD_OF references, typed tags."""
    processes = trace.get("processes") or {}
    out = []
    for sp in trace.get("spans") or []:
        tags = {t["key"]: t.get("value") for t in sp.get("tags") or []}
        parent = next(
            (r["spanID"] for r in sp.get("references") or [] if r.get("refType") == "CHILD_OF"),
            sp.get("parentSpanID", ""),
        )
        start_ns = int(sp["startTime"]) * 1000
        out.append(
            Span(
                trace_id=hex_id(sp["traceID"], 16),
                span_id=hex_id(sp["spanID"], 8),
                parent_id=hex_id(parent, 8),
                name=str(sp["operationName"]),
                start_ns=start_ns,
                end_ns=start_ns + int(sp.get("duration") or 0) * 1000,
                attributes=tags,
                status_error=tags.get("error") in (True, "true") or tags.get("otel.status_code") == "ERROR",
                service=str((processes.get(sp.get("processID")) or {}).get("serviceName", "")),
                events=tuple(_legacy_event(log) for log in sp.get("logs") or []),
            )
        )
    return out


def _legacy_event(log: dict[str, Any]) -> Event:
    """A legacy-API span log: µs timestamp, typed fields, the event's name in the ``event`` field."""
    fields = {f["key"]: f.get("value") for f in log.get("fields") or []}
    return Event(str(fields.pop("event", "")), int(log.get("timestamp") or 0) * 1000, fields)
