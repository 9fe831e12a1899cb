"""The Ray driver's view of the run's /metrics pages on every node (export/ray_store.py puts them in Ray's store):
every :data:`REFRESH_S`, on the flusher thread, it reads its job's entries, drops those of nodes Ray no longer
lists alive and those whose beat stopped, and

- writes them into its node's file_sd file (``$VERL_OTEL_DIR/prometheus_targets.json``: the compose stack's pull
  agent and ``verl-otel top`` on the head read every host's processes from it), marked as the driver's so that
  the next refresh replaces them and a process' own entry (same address) is kept as it wrote it;
- serves them as Prometheus HTTP service discovery (``http_sd_configs``) at ``http://HOST:VERL_OTEL_SD_PORT``
  :data:`~verl_otel.semconv.SD_PATH` when that port is set.

At exit the driver takes its entries out of the file and its job's keys out of the store."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from verl_otel import config as cfg
from verl_otel import semconv as sc
from verl_otel._log import logger, warn_once
from verl_otel.export import prometheus
from verl_otel.export.ray_store import BEAT_S, RayStore

REFRESH_S = 5.0
STALE_S = 4 * BEAT_S  # an entry whose beat has not moved for this long is left out (a process killed hard)
MAX_ENTRIES = 4096  # entries read per refresh: 64 nodes x 64 processes
VIA_LABEL = "__verl_otel_via"  # internal: a file entry the driver wrote (replaced at each refresh)
VIA_RAY = "ray"


class ClusterTargets:
    """The driver's discovery: :meth:`tick` on the flusher's ticks (it refreshes every ``refresh_s``)."""

    def __init__(
        self, data_dir: Path, sd_bind: str = "127.0.0.1", sd_port: int = 0, refresh_s: float = REFRESH_S
    ) -> None:
        self.data_dir = data_dir
        self.refresh_s, self.stale_s = refresh_s, STALE_S
        self.groups: list[dict[str, Any]] = []  # the last answer (swapped whole: the server reads it unlocked)
        self.refreshes = 0
        self._beats: dict[bytes, tuple[Any, float]] = {}  # key -> (beat, when it last moved, monotonic)
        self._last = float("-inf")
        self._written: list[dict[str, Any]] | None = None  # the groups last written into the file
        self._closed = False  # no refresh after close: the file keeps only the processes' own entries
        self._server: ThreadingHTTPServer | None = None
        self.sd_address: tuple[str, int] | None = None
        if sd_port:
            self._serve(sd_bind, sd_port)

    # -- the refresh (flusher thread) -------------------------------------------------------------------------
    def tick(self) -> None:
        if self._closed or time.monotonic() - self._last < self.refresh_s:
            return
        self._last = time.monotonic()
        store = RayStore.here()
        if store is None:
            return
        try:
            self.refresh(store.entries(MAX_ENTRIES), store.live_nodes(), store.dead_hosts(), here=store.node)
        except Exception as exc:  # noqa: BLE001 - the last answer stays; the next tick tries again
            warn_once("discovery", f"cannot read the run's targets from Ray's store ({exc!r}); trying again")

    def refresh(
        self, entries: dict[bytes, dict[str, Any]], alive: dict[str, str], dead_hosts: set[str], here: str = ""
    ) -> None:
        """The listing from the store's ``entries`` and Ray's ``alive`` nodes (id -> host name); ``here``: the
        driver's node (a loopback address of any other node is left out, with one line: it cannot be reached)."""
        now = time.monotonic()
        groups = []
        for key, doc in sorted(entries.items()):
            beat = doc.get("beat")
            seen = self._beats.get(key)
            moved = now if seen is None or seen[0] != beat else seen[1]
            self._beats[key] = (beat, moved)
            targets, labels = doc.get("targets"), doc.get("labels")
            if str(doc.get("node")) not in alive or now - moved > self.stale_s:
                continue
            if isinstance(targets, list) and targets and isinstance(labels, dict):
                if _loopback(str(targets[0])) and str(doc.get("node")) != here:
                    warn_once(
                        f"sd-loopback:{doc.get('node')}",
                        f"a process on {labels.get(sc.LABEL_HOST, '?')} listens on {targets[0]} only: Prometheus "
                        f"cannot reach it from here; unset {sc.ENV_PROM_HOST} there (the node's IP) or set 0.0.0.0",
                    )
                    continue
                groups.append({"targets": [str(t) for t in targets[:1]], "labels": {**labels}})
        self._beats = {k: v for k, v in self._beats.items() if k in entries}
        self.groups = groups
        self.refreshes += 1
        if groups != self._written or dead_hosts:  # an unchanged list is not rewritten every refresh
            self._write(groups, dead_hosts)
            self._written = groups

    def _write(self, groups: list[dict[str, Any]], dead_hosts: set[str]) -> None:
        def change(kept: list[dict[str, Any]]) -> list[dict[str, Any]]:
            # a process' own entry stays as it wrote it; an entry of a dead node's host goes (a shared folder)
            own = [
                g
                for g in kept
                if (g.get("labels") or {}).get(VIA_LABEL) != VIA_RAY
                and (g.get("labels") or {}).get(sc.LABEL_HOST) not in dead_hosts
            ]
            listed = {str(t) for g in own for t in g.get("targets") or ()}
            ours = [
                {"targets": g["targets"], "labels": {**g["labels"], VIA_LABEL: VIA_RAY}}
                for g in groups
                if g["targets"][0] not in listed
            ]
            return own + ours

        prometheus.edit_targets(self.data_dir, change)

    # -- the http_sd endpoint ---------------------------------------------------------------------------------
    def answer(self) -> bytes:
        """The http_sd body: the target groups, internal labels kept (Prometheus drops ``__`` labels)."""
        return json.dumps(self.groups).encode()

    def _serve(self, bind: str, port: int) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != sc.SD_PATH:
                    self.send_error(404, f"the targets are at {sc.SD_PATH}")
                    return
                body = owner.answer()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        try:
            server = ThreadingHTTPServer((bind, port), Handler)
        except OSError as exc:
            warn_once("sd-port", f"cannot serve the run's service discovery on {bind}:{port} ({exc}); the file is kept")
            return
        server.daemon_threads = True
        self._server = server
        self.sd_address = (bind, int(server.server_address[1]))
        threading.Thread(target=server.serve_forever, name="verl-otel-sd", daemon=True).start()
        logger.info("the run's Prometheus targets are served at http://%s:%s%s", bind, self.sd_address[1], sc.SD_PATH)

    # -- exit --------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """The driver ends (on the flusher): its entries out of the file, its job's keys out of the store."""
        self._closed = True
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self.refreshes:
            self._write([], set())
        store = RayStore.here()
        try:
            if store is not None:
                store.delete(store.prefix.encode(), by_prefix=True)
        except Exception as exc:  # noqa: BLE001
            warn_once("discovery-close", f"cannot take the run's targets out of Ray's store ({exc!r})")


def _loopback(target: str) -> bool:
    host = target.rsplit(":", 1)[0].strip("[]")
    return host.startswith("127.") or host in ("localhost", "::1")


def start(settings: cfg.Settings, every_tick: Callable[[Callable[[], object]], None]) -> ClusterTargets | None:
    """The driver's discovery, ticking on the flusher (None, with one line, when it cannot be made)."""
    try:
        cluster = ClusterTargets(settings.data_dir, settings.prometheus_host, settings.sd_port)
        every_tick(cluster.tick)
        return cluster
    except Exception as exc:  # noqa: BLE001 - no discovery across nodes, never raise
        warn_once("discover", f"cannot list the run's other nodes for Prometheus ({exc!r})")
        return None
