"""`make bench-scale`'s multi-host figures (issue 34): what the driver's discovery and `verl-otel gather` cost at 32
nodes x 8 processes, on this machine.

- discovery: 256 processes' entries as Ray's store holds them (``export/ray_store.py``'s value), the driver's
  refresh (``export/discovery.py::ClusterTargets.refresh``: prune, build the listing), the first one with the head's
  file_sd file written under its lock (``sd_first_refresh_ms``), then the steady state, every beat moved and the
  listing unchanged, so not rewritten (``sd_refresh_ms``, the median), and the http_sd answer's size;
- gather: 32 node folders, each with a 1,000-step run's share of trace files (``--mb`` per node) and stall
  evidence, read by each node's task code (``cli/gather_files.py::collect``, within the per-node budget) and laid
  out on the head (``lay_out``): seconds and bytes. Ray's transport of the bytes between hosts is not in it (a
  network's figure, not ours).

Prints ``SCALE_HOSTS {json}`` (bench/scale.py reads it)."""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from verl_otel import semconv as sc
from verl_otel.cli import gather_files
from verl_otel.export import prometheus
from verl_otel.export.discovery import ClusterTargets

ROLES = (sc.PROCESS_ROLE_TRAINER, sc.PROCESS_ROLE_WORKER, sc.PROCESS_ROLE_AGENT_LOOP, sc.PROCESS_ROLE_REWARD)


def _entries(nodes: int, per_node: int, beat: int) -> dict[bytes, dict]:
    out = {}
    for n in range(nodes):
        for p in range(per_node):
            pid = 1000 + p
            labels = {
                sc.LABEL_PROCESS_ROLE: ROLES[p % len(ROLES)],
                sc.LABEL_HOST: f"node{n:02d}",
                prometheus.PID_LABEL: str(pid),
            }
            key = f"verl_otel:targets:job:{n:02d}:{pid}:10.0.{n}.1:{9000 + p}".encode()
            out[key] = {"targets": [f"10.0.{n}.1:{9000 + p}"], "labels": labels, "node": f"{n:02d}", "beat": beat}
    return out


def discovery(nodes: int, per_node: int, rounds: int) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="verl-otel-sd-"))
    try:
        cluster = ClusterTargets(tmp, refresh_s=0)
        alive = {f"{n:02d}": f"node{n:02d}" for n in range(nodes)}
        t0 = time.perf_counter()
        cluster.refresh(_entries(nodes, per_node, beat=-1), alive, set(), here="00")
        first = time.perf_counter() - t0
        times = []
        for r in range(rounds):
            entries = _entries(nodes, per_node, beat=r)
            t0 = time.perf_counter()
            cluster.refresh(entries, alive, set(), here="00")
            times.append(time.perf_counter() - t0)
        listed = len(json.loads((tmp / sc.PROM_TARGETS_FILE).read_text()))
        if listed != nodes * per_node:
            raise SystemExit(f"discovery listed {listed} of {nodes * per_node}")
        return {
            "sd_first_refresh_ms": first * 1000,
            "sd_refresh_ms": statistics.median(times) * 1000,
            "sd_answer_kb": len(cluster.answer()) / 1024,
            "sd_targets": float(listed),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _node_dir(root: Path, mb: float) -> None:
    """One node's VERL_OTEL_DIR: its trace files (a ~2 KB OTLP/JSON line per span batch) and a stall file."""
    line = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x" * 1900}]}]}]}).encode() + b"\n"
    per_file = 64 * 2**20
    left = int(mb * 2**20)
    root.mkdir(parents=True)
    names = [sc.TRACES_FILE, *(f"{sc.TRACES_FILE}.{i}" for i in range(1, 8))]
    for name in names:
        if left <= 0:
            break
        size = min(left, per_file)
        with open(root / name, "wb") as fh:
            fh.write(line * (size // len(line)))
        left -= size
    (root / sc.STALLS_DIR).mkdir()
    (root / sc.STALLS_DIR / f"step3-update_actor-train_worker-{root.name}-1001.txt").write_text("stack\n" * 200)


def gather(nodes: int, mb: float, max_bytes: int) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="verl-otel-gather-"))
    try:
        for n in range(nodes):
            _node_dir(tmp / "nodes" / f"node{n:02d}", mb)
        t0 = time.perf_counter()
        got = [
            gather_files.collect(str(tmp / "nodes" / f"node{n:02d}"), max_bytes, f"node{n:02d}") for n in range(nodes)
        ]
        collected = time.perf_counter() - t0
        written = gather_files.lay_out(tmp / "out", got)
        total = time.perf_counter() - t0
        return {
            "gather_s": total,
            "gather_collect_s": collected,
            "gather_mb": sum(written.values()) / 2**20,
            "gather_nodes": float(len(written)),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    small = len(sys.argv) > 1 and sys.argv[1] == "small"
    nodes, per_node, mb = (4, 8, 1.0) if small else (32, 8, 35.0)
    figures = discovery(nodes, per_node, rounds=5 if small else 20)
    figures.update(gather(nodes, mb, max_bytes=512 * 2**20))
    print("SCALE_HOSTS " + json.dumps(figures))


if __name__ == "__main__":
    main()
