"""This process' /metrics addresses, where a Prometheus of the run finds them with no per-node set-up: the run's
file_sd file on this node (``$VERL_OTEL_DIR/prometheus_targets.json``) and, in a process that runs inside Ray,
Ray's GCS key-value store (as Ray's own metrics discovery does), under
``verl_otel:targets:<job id>:<node id>:<pid>:<address>``, put again every :data:`BEAT_S` with a counter that
moves (the driver drops an entry whose counter stopped: a process killed without its exit hook).

Ray is used only where the process already runs it (``sys.modules``; this module never imports it), and only on
the flusher thread: a training thread never waits on the store. Every call is bounded (:data:`GCS_TIMEOUT_S`) and
never raises (one line names what failed)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from verl_otel import semconv as sc
from verl_otel._log import warn_once

BEAT_S = 15.0  # an entry is put again this often (its beat counter moves)
GCS_TIMEOUT_S = 2.0  # each call to the store
MAX_VALUE_BYTES = 8192  # one entry; bigger label sets are not ours


class RayStore:
    """Ray's GCS key-value store as seen from this process (None from :meth:`here` outside Ray)."""

    def __init__(self, gcs: Any, ray: Any, job: str, node: str) -> None:
        self._gcs, self._ray = gcs, ray
        self.job, self.node = job, node

    @classmethod
    def here(cls) -> RayStore | None:
        ray = sys.modules.get("ray")
        kv = sys.modules.get("ray.experimental.internal_kv")
        try:
            if ray is None or kv is None or not ray.is_initialized() or not kv._internal_kv_initialized():
                return None
            ctx = ray.get_runtime_context()
            return cls(kv.internal_kv_get_gcs_client(), ray, str(ctx.get_job_id()), str(ctx.get_node_id()))
        except Exception:  # noqa: BLE001 - not connected (yet): no store
            return None

    @property
    def prefix(self) -> str:
        """The keys of this job's processes."""
        return f"{sc.DISCOVERY_KV_PREFIX}{self.job}:"

    def key(self, pid: int, target: str) -> bytes:
        return f"{self.prefix}{self.node}:{pid}:{target}".encode()

    def put(self, key: bytes, value: dict[str, Any]) -> None:
        self._gcs.internal_kv_put(key, json.dumps(value).encode(), True, None, timeout=GCS_TIMEOUT_S)

    def delete(self, key: bytes, by_prefix: bool = False) -> None:
        self._gcs.internal_kv_del(key, by_prefix, None, timeout=GCS_TIMEOUT_S)

    def entries(self, limit: int) -> dict[bytes, dict[str, Any]]:
        """This job's entries (at most ``limit``), parsed; one that does not parse is left out."""
        keys = sorted(self._gcs.internal_kv_keys(self.prefix.encode(), None, timeout=GCS_TIMEOUT_S))[:limit]
        if not keys:
            return {}
        out = {}
        for key, raw in self._gcs.internal_kv_multi_get(keys, None, timeout=GCS_TIMEOUT_S).items():
            try:
                doc = json.loads(raw[:MAX_VALUE_BYTES]) if raw else None
            except ValueError:
                continue
            if isinstance(doc, dict):
                out[bytes(key)] = doc
        return out

    def live_nodes(self) -> dict[str, str]:
        """Ray's alive nodes: node id -> host name."""
        return {
            str(n.get("NodeID")): str(n.get("NodeManagerHostname", ""))
            for n in self._ray.nodes()
            if n.get("Alive") or n.get("alive")
        }

    def dead_hosts(self) -> set[str]:
        """Host names of dead nodes that no alive node shares."""
        nodes = self._ray.nodes()
        alive = {str(n.get("NodeManagerHostname", "")) for n in nodes if n.get("Alive")}
        return {str(n.get("NodeManagerHostname", "")) for n in nodes if not n.get("Alive")} - alive - {""}


def node_ip_bind() -> str:
    """Where this process' /metrics listens when ``VERL_OTEL_PROMETHEUS_HOST`` is not set: 127.0.0.1, except in
    a Ray worker node of a cluster (its node IP differs from the head's GCS address), where Ray's node IP, so
    that the head's Prometheus reaches it (Ray's own ports listen there too). Local information only."""
    ray = sys.modules.get("ray")
    try:
        if ray is not None and ray.is_initialized():
            node_ip = str(ray.util.get_node_ip_address())
            head = str(ray.get_runtime_context().gcs_address).rsplit(":", 1)[0].strip("[]")
            if node_ip and head and node_ip != head and not node_ip.startswith("127."):
                return node_ip
    except Exception:  # noqa: BLE001 - the local default
        pass
    return "127.0.0.1"


class ProcessTargets:
    """This process' /metrics pages (its own, a rollout server's vLLM page): listed in the file_sd file and the
    Ray store from the flusher thread, put again on its ticks, taken out at exit."""

    def __init__(
        self,
        data_dir: Path,
        submit: Callable[[Callable[[], None]], None],
        every_tick: Callable[[Callable[[], object]], None],
        beat_s: float = BEAT_S,
    ) -> None:
        self._data_dir = data_dir
        self._submit, self._every_tick = submit, every_tick
        self._beat_s = beat_s
        self._lock = threading.Lock()
        self._pages: list[tuple[str, int, dict[str, str]]] = []  # (bind, port, labels), as asked
        self._groups: dict[str, dict[str, Any]] = {}  # target -> its group, once written (flusher)
        self._beat = 0
        self._last_put = float("-inf")
        self._ticking = False

    def add(self, bind: str, port: int, labels: dict[str, str]) -> None:
        """List ``bind:port`` (never blocks: the writes are the flusher's)."""
        with self._lock:
            self._pages.append((bind, port, dict(labels)))
            start, self._ticking = not self._ticking, True
        self._submit(lambda: self._write(bind, port, labels))
        if start:
            self._every_tick(self._tick)

    @property
    def listed(self) -> bool:
        return bool(self._pages)

    def _write(self, bind: str, port: int, labels: dict[str, str]) -> None:
        from verl_otel.export import prometheus  # on the flusher: prometheus_client only where /metrics is served

        group = prometheus.register_target(self._data_dir, bind, port, labels)
        with self._lock:
            self._groups[group["targets"][0]] = group
        self._put(force=True)

    def _tick(self) -> None:
        self._put(force=False)

    def _put(self, force: bool) -> None:
        if not force and time.monotonic() - self._last_put < self._beat_s:
            return
        with self._lock:
            groups = list(self._groups.items())
        store = RayStore.here() if groups else None
        if store is None:
            return
        self._last_put = time.monotonic()
        self._beat += 1
        try:
            for target, group in groups:
                store.put(store.key(os.getpid(), target), {**group, "node": store.node, "beat": self._beat})
        except Exception as exc:  # noqa: BLE001 - discovery is a convenience, never an error of the run
            warn_once("ray-store", f"cannot list this process' /metrics in Ray's store ({exc!r}); its node's file does")

    def remove_all(self) -> int:
        """At exit (on the flusher: this submits): out of the file and the store; the pages taken out."""
        with self._lock:
            pages, self._pages = list(self._pages), []
        if pages:
            self._submit(lambda: self._remove(pages))
        return len(pages)

    def _remove(self, pages: Iterable[tuple[str, int, dict[str, str]]]) -> None:
        from verl_otel.export import prometheus

        for bind, port, _labels in pages:
            prometheus.unregister_target(self._data_dir, bind, port)
        with self._lock:
            targets, self._groups = list(self._groups), {}
        store = RayStore.here() if targets else None
        try:
            for target in targets if store is not None else ():
                store.delete(store.key(os.getpid(), target))  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001
            warn_once("ray-store-del", f"cannot take this process out of Ray's store ({exc!r})")
