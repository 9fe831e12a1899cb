"""Jaeger query client (urllib only): the stable ``/api/v3`` API (Jaeger 2.x), falling back to the legacy
``/api/traces`` search (Jaeger 1.x and 2.x up to 2.20) when v3 is not there. Every failure is one
:class:`JaegerError` with a one-line message."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis.model import Span
from verl_otel.analysis.otlp_json import spans_from_request


class JaegerError(Exception):
    """Jaeger unreachable, or it answered something we cannot read."""


class _NotFound(Exception):
    def __init__(self, body: str) -> None:
        self.body = body


def _rfc3339(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def trace_link(ui_base: str, trace_id: str) -> str:
    return f"{ui_base.rstrip('/')}/trace/{trace_id}"


class JaegerClient:
    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self.base = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str, params: dict[str, Any]) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}" if params else f"{self.base}{path}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:
                body = resp.read()
        except urllib.error.HTTPError as err:
            text = err.read().decode(errors="replace")
            if err.code == 404:
                raise _NotFound(text) from None
            raise JaegerError(f"Jaeger at {self.base} answered HTTP {err.code} for {path}: {text[:200]}") from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise JaegerError(f"cannot reach Jaeger at {self.base}: {reason}") from None
        try:
            return json.loads(body)
        except ValueError:
            raise JaegerError(f"Jaeger at {self.base} answered something that is not JSON for {path}: "
                              f"{body[:80]!r}") from None

    def find_steps(self, service: str, start_ns: int, end_ns: int, limit: int = 1000) -> list[Span]:
        """Every span of the ``step`` traces of ``service`` that started in the window."""
        try:
            return self._find_v3(service, start_ns, end_ns, limit)
        except _NotFound as nf:
            if "no traces found" in nf.body.lower():
                return []
        try:
            return self._find_legacy(service, start_ns, end_ns, limit)
        except _NotFound as nf:
            if "no traces found" in nf.body.lower() or not nf.body.strip():
                return []
            raise JaegerError(f"Jaeger at {self.base} has neither /api/v3/traces nor /api/traces") from None

    def _find_v3(self, service: str, start_ns: int, end_ns: int, limit: int) -> list[Span]:
        doc = self._get("/api/v3/traces", {
            "query.service_name": service, "query.operation_name": sc.SPAN_STEP,
            "query.start_time_min": _rfc3339(start_ns), "query.start_time_max": _rfc3339(end_ns),
            "query.num_traces": limit,
        })
        try:
            return list(spans_from_request(doc["result"]))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise JaegerError(f"unexpected /api/v3/traces response from {self.base}") from None

    def _find_legacy(self, service: str, start_ns: int, end_ns: int, limit: int) -> list[Span]:
        doc = self._get("/api/traces", {"service": service, "operation": sc.SPAN_STEP,
                                        "start": start_ns // 1000, "end": end_ns // 1000, "limit": limit})
        try:
            return [span for trace in doc.get("data") or [] for span in _legacy_trace(trace)]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise JaegerError(f"unexpected /api/traces response from {self.base}") from None


def _legacy_trace(trace: dict[str, Any]) -> list[Span]:
    processes = trace.get("processes") or {}
    out = []
    for sp in trace.get("spans") or []:
        tags = {t["key"]: t.get("value") for t in sp.get("tags") or []}
        parent = next((r["spanID"] for r in sp.get("references") or [] if r.get("refType") == "CHILD_OF"), "")
        start_ns = int(sp["startTime"]) * 1000
        out.append(Span(
            trace_id=str(sp["traceID"]).lower().rjust(32, "0"), span_id=str(sp["spanID"]).lower(),
            parent_id=str(parent).lower(), name=str(sp["operationName"]), start_ns=start_ns,
            end_ns=start_ns + int(sp.get("duration", 0)) * 1000, attributes=tags,
            error=tags.get("error") in (True, "true") or tags.get("otel.status_code") == "ERROR",
            service=str((processes.get(sp.get("processID")) or {}).get("serviceName", "")),
        ))
    return out
