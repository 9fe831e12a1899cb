"""Where ``verl-otel top`` reads metrics: every /metrics page of the run's ``prometheus_targets.json``
(scraped directly, no Prometheus needed: a login node over SSH is enough) or a Prometheus server's
instant query. Both give the same flat list of :class:`Series`."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

from verl_otel import semconv as sc

#: file_sd labels starting with this are Prometheus-internal (dropped by its relabeling)
_INTERNAL = "__"
SCRAPE_TIMEOUT_S = 2.0
#: pages scraped at once: a frame of 128 pages that each take 50 ms is two rounds, not eight
SCRAPE_CONCURRENCY = 64


@dataclass(frozen=True)
class Series:
    """One sample line: ``name{labels} value`` (histograms as their _bucket/_sum/_count lines)."""

    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Scrape:
    series: list[Series] = field(default_factory=list)
    targets: int = 0
    failed: list[str] = field(default_factory=list)  # "host:port: reason"
    source: str = ""


class Source(Protocol):
    def read(self) -> Scrape: ...


class SourceError(Exception):
    """The source itself cannot be read (no targets file, Prometheus unreachable)."""


def parse_metrics_text(text: str, extra: dict[str, str] | None = None) -> list[Series]:
    """The samples of a Prometheus text page, each with ``extra`` labels added (the target's)."""
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.append(Series(s.name, {**(extra or {}), **s.labels}, float(s.value)))
    return out


def _get(url: str, timeout: float) -> str:
    req = urllib.request.Request(url, headers={"Accept": "text/plain"})  # not OpenMetrics: plain text parser
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read().decode("utf-8", "replace")


def _reason(err: BaseException) -> str:
    reason = getattr(err, "reason", None) or err
    return getattr(reason, "strerror", None) or str(reason) or type(err).__name__


class TargetsFile:
    """The run's file_sd file (``$VERL_OTEL_DIR/prometheus_targets.json``), or its directory."""

    def __init__(self, path: str | Path, timeout_s: float = SCRAPE_TIMEOUT_S) -> None:
        p = Path(path)
        self.path = p / sc.PROM_TARGETS_FILE if p.is_dir() else p
        self.timeout_s = timeout_s

    def targets(self) -> list[tuple[str, dict[str, str]]]:
        try:
            groups = json.loads(self.path.read_text())
        except OSError as err:
            raise SourceError(f"cannot read {self.path}: {err.strerror or err}") from None
        except ValueError as err:
            raise SourceError(f"{self.path} is not JSON: {err}") from None
        out = []
        for g in groups if isinstance(groups, list) else []:
            if not isinstance(g, dict):
                continue
            labels = {str(k): str(v) for k, v in (g.get("labels") or {}).items() if not str(k).startswith(_INTERNAL)}
            out += [(str(t), labels) for t in g.get("targets") or []]
        return out

    def _scrape_one(self, target: str, labels: dict[str, str]) -> list[Series] | str:
        try:
            text = _get(f"http://{target}/metrics", self.timeout_s)
            return parse_metrics_text(text, {**labels, "instance": target})
        except (OSError, ValueError) as err:  # refused (an exited process), timeout, garbage
            return f"{target}: {_reason(err)}"

    def read(self) -> Scrape:
        """Every page at once (up to SCRAPE_CONCURRENCY), within one deadline for the whole frame: a page
        that has not answered by then (one that trickles its body past the socket timeout too) is a failure
        of this frame, and the frame does not wait for it."""
        targets = self.targets()
        out = Scrape(targets=len(targets), source=str(self.path))
        if not targets:
            return out
        rounds = -(-len(targets) // SCRAPE_CONCURRENCY)
        pool = ThreadPoolExecutor(max_workers=min(SCRAPE_CONCURRENCY, len(targets)))
        try:
            futures = [pool.submit(self._scrape_one, *t) for t in targets]
            wait(futures, timeout=self.timeout_s * rounds + 0.5)
            for (target, _), fut in zip(targets, futures, strict=True):
                got = fut.result() if fut.done() else f"{target}: no answer within {self.timeout_s:g}s"
                if isinstance(got, str):
                    out.failed.append(got)
                else:
                    out.series += got
        finally:
            pool.shutdown(wait=False, cancel_futures=True)  # a late page's thread ends at its socket timeout
        return out


class PrometheusQuery:
    """A Prometheus server's latest values of every verl series (optionally one experiment's)."""

    def __init__(self, url: str, experiment: str | None = None, timeout_s: float = 10.0) -> None:
        url = url.strip().rstrip("/")
        self.base = url if "://" in url else f"http://{url}"
        self.experiment = experiment
        self.timeout_s = timeout_s

    def selector(self) -> str:
        # and the rollout servers' vLLM series `top` shows (live/replicas.py): unlabelled unless the run put its
        # names there, so an experiment filter leaves them out
        engine = "|".join((sc.VLLM_REQUESTS_RUNNING, sc.VLLM_REQUESTS_WAITING, sc.VLLM_GENERATION_TOKENS))
        sel = f'__name__=~"verl_.+|{engine}"'
        if self.experiment:
            sel += f',{sc.LABEL_EXPERIMENT}="{self.experiment}"'
        return "{" + sel + "}"

    def _query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            doc: Any = json.loads(_get(url, self.timeout_s))
        except urllib.error.HTTPError as err:
            raise SourceError(f"Prometheus at {self.base} answered HTTP {err.code}") from None
        except (OSError, ValueError) as err:
            raise SourceError(f"cannot query Prometheus at {self.base}: {_reason(err)}") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise SourceError(f"Prometheus at {self.base} answered an error: {str(doc)[:160]}")
        return list((doc.get("data") or {}).get("result") or [])

    def history(self, run: str | None, keys: str, window: str = "3h") -> list[dict[str, float]]:
        """verl's logged scalars whose key matches the regex ``keys``, as Prometheus kept them: one dict per
        trainer scrape, oldest first (what a /metrics page forgets: earlier steps' phase times, the grad-norm
        history). ``run``: project/experiment."""
        matchers = [f'{sc.LABEL_KEY}=~"{keys}"'] + (
            [f'{sc.LABEL_EXPERIMENT}="{self.experiment}"'] if self.experiment else []
        )
        sel = sc.TRAINING_METRIC.name + "{" + ",".join(matchers) + "}"
        by_time: dict[tuple[str, float], dict[str, float]] = {}
        for row in self._query(f"{sel}[{window}]"):
            labels = row.get("metric") or {}
            if run and f"{labels.get(sc.LABEL_PROJECT, '')}/{labels.get(sc.LABEL_EXPERIMENT, '')}" != run:
                continue
            key = labels.get(sc.LABEL_KEY, "")
            for ts, raw in row.get("values") or []:
                try:
                    by_time.setdefault((labels.get("instance", ""), float(ts)), {})[key] = float(raw)
                except (TypeError, ValueError):
                    continue
        return [by_time[k] for k in sorted(by_time, key=lambda k: k[1])]

    def read(self) -> Scrape:
        rows = self._query(self.selector())
        out = Scrape(source=f"Prometheus at {self.base}")
        for row in rows:
            labels = dict(row.get("metric") or {})
            name = labels.pop("__name__", "")
            try:
                out.series.append(Series(name, labels, float(row["value"][1])))
            except (KeyError, IndexError, TypeError, ValueError):
                continue
        out.targets = len({s.labels.get("instance", "") for s in out.series})
        return out
