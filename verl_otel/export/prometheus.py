"""Pull path: a /metrics endpoint per instrumented process, and a Prometheus file_sd file listing
every endpoint of the run (``$VERL_OTEL_DIR/prometheus_targets.json``).

The collector renders the runtime's :class:`~verl_otel.process.metrics.MetricStore` at scrape time. Exemplars (the
step's trace id on the duration histograms) appear when the scraper asks for OpenMetrics, which
Prometheus does when started with ``--enable-feature=exemplar-storage``.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import socket
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Exemplar

from verl_otel import config as cfg
from verl_otel import semconv as sc
from verl_otel._log import warn_once
from verl_otel.export.otlp_json import open_regular, write_all
from verl_otel.process.metrics import MetricStore
from verl_otel.process.text import utf8

PID_LABEL = "__verl_otel_pid"  # internal (dropped by Prometheus after relabeling): lets us prune dead entries


class StoreCollector:
    def __init__(self, store: MetricStore) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        grouped: dict[sc.MetricDef, list[tuple[tuple[str, ...], float]]] = defaultdict(list)
        for metric, labels, value in self._store.exported():
            grouped[metric].append((labels, value))
        for metric, rows in grouped.items():
            family: Any
            if metric.kind == "counter":
                family = CounterMetricFamily(metric.otel_name, metric.help, labels=list(metric.labels))
            else:
                family = GaugeMetricFamily(metric.name, metric.help, labels=list(metric.labels))
            for labels, value in rows:
                family.add_metric([utf8(v) for v in labels], value)
            yield family
        hist: dict[sc.MetricDef, HistogramMetricFamily] = {}
        for metric, labels, series in self._store.histograms():
            family = hist.get(metric)
            if family is None:
                family = hist[metric] = HistogramMetricFamily(metric.name, metric.help, labels=list(metric.labels))
            buckets: list[Any] = []
            running = 0
            for i, count in enumerate(series.counts):
                running += count
                le = "+Inf" if i == len(series.bounds) else _fmt(series.bounds[i])
                ex = series.exemplars.get(i)
                exemplar = Exemplar({"trace_id": ex.trace_id}, ex.value, ex.timestamp) if ex else None
                buckets.append((le, running, exemplar) if exemplar else (le, running))
            family.add_metric([utf8(v) for v in labels], buckets, series.total)
        yield from hist.values()


def _fmt(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(bound)


def serve(store: MetricStore, host: str, port: int) -> int:
    """Start /metrics on a daemon thread; returns the bound port."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return int(server.server_port)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.cache
def advertised_host(bind: str) -> str:
    """The address the file_sd entry gives for a /metrics bound to ``bind``: a wildcard bind is listed under an
    address another host can reach (the host name alone resolves to 127.0.0.1 on many machines): Ray's node IP
    where Ray runs (what Ray's own nodes use), else the interface of the default route, else the host name.
    Cached: the entry is removed at exit under the same address."""
    if bind not in ("0.0.0.0", "::", ""):
        return bind
    ray = sys.modules.get("ray")
    try:
        if ray is not None and ray.is_initialized():
            return str(ray.util.get_node_ip_address())
    except Exception:  # noqa: BLE001 - an address is all we need; the next way is as good
        pass
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # a UDP connect sends nothing: it picks the outgoing interface
            address = str(probe.getsockname()[0])
        if not address.startswith("127.") and address != "0.0.0.0":
            return address
    except OSError:
        pass
    return socket.gethostname()


def _stale(group: dict[str, Any]) -> bool:
    """An entry of a process of this host that has exited. An entry says its host (``verl_host``): only this
    host's entries are judged by pid (a shared VERL_OTEL_DIR lists other hosts' processes, whose pids mean
    nothing here); an entry without one (an older release's) is judged by its address, as it used to be."""
    labels = group.get("labels") or {}
    pid = str(labels.get(PID_LABEL, ""))
    if not pid.isdigit():
        return False
    host = labels.get(sc.LABEL_HOST)
    if host is not None:
        return str(host) == cfg.hostname() and not _alive(int(pid))
    local = {socket.gethostname(), "127.0.0.1", "localhost", advertised_host("0.0.0.0")}
    targets = group.get("targets") or [""]
    return str(targets[0]).rsplit(":", 1)[0] in local and not _alive(int(pid))


def register_target(data_dir: Path, host: str, port: int, labels: dict[str, str]) -> dict[str, Any]:
    """Add this process' endpoint to the run's file_sd file (read-modify-rename under a lock),
    pruning entries of dead processes on this host; returns the group listed."""
    entry = target_group(advertised_host(host), port, labels)
    edit_targets(data_dir, lambda kept: [*(g for g in kept if g.get("targets") != entry["targets"]), entry])
    return entry


def unregister_target(data_dir: Path, host: str, port: int) -> None:
    """Remove this process' endpoint (at exit: Prometheus stops scraping a process that is gone)."""
    targets = [f"{advertised_host(host)}:{port}"]
    edit_targets(data_dir, lambda kept: [g for g in kept if g.get("targets") != targets])


def target_group(addr_host: str, port: int, labels: dict[str, str]) -> dict[str, Any]:
    """This process' file_sd/http_sd group: its address, the run's labels, its host and (internal) pid."""
    own = {sc.LABEL_HOST: cfg.hostname(), PID_LABEL: str(os.getpid())}
    return {"targets": [f"{addr_host}:{port}"], "labels": {**labels, **own}}


def edit_targets(data_dir: Path, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
    """Rewrite the run's file_sd file as ``change(groups)`` (the stale ones pruned first), under its lock."""
    path = data_dir / sc.PROM_TARGETS_FILE
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        # the lock file is never truncated and no symlink in the directory is followed
        lock_fd = open_regular(data_dir / (sc.PROM_TARGETS_FILE + ".lock"), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            kept = change([g for g in _read_groups(path) if isinstance(g, dict) and not _stale(g)])
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            if os.path.lexists(tmp):
                os.unlink(tmp)
            fd = open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            try:
                write_all(fd, json.dumps(kept, indent=1).encode())
            finally:
                os.close(fd)
            os.replace(tmp, path)
        finally:
            os.close(lock_fd)
    except OSError as exc:
        warn_once("file_sd", f"cannot write {path}: {exc}; Prometheus will not discover this process")


def _read_groups(path: Path) -> list[Any]:
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError:
        return []
    try:
        with os.fdopen(fd, "rb") as fh:
            groups = json.loads(fh.read(16 * 2**20))
    except (OSError, ValueError):
        return []
    return groups if isinstance(groups, list) else []
