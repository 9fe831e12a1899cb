"""``verl-otel gather``: the embedded default across hosts. With no Collector and no shared filesystem each node
keeps its own ``$VERL_OTEL_DIR``; this brings every alive node's trace files, stall evidence, unsent spans and
targets file to this machine (a Ray task pinned to each node), laid out so that ``doctor --dir OUT``,
``slow-steps --file OUT/traces.jsonl``, ``val-generations --file OUT/traces.jsonl`` and ``push --dir OUT`` read
the whole run. Bounded in bytes (per node and in all) and in time; a dead or slow node is named and skipped."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_otel import semconv as sc
from verl_otel.cli.argtypes import positive_float, positive_int
from verl_otel.cli.gather_files import NodeFiles, collect, lay_out
from verl_otel.cli.spans import DEFAULT_DIR

PROG = "verl-otel gather"
MAX_BYTES = 512 * 2**20  # per node
MAX_TOTAL_BYTES = 4 * 2**30
TIMEOUT_S = 120.0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("gather", help="bring every node's telemetry files to this machine", description=__doc__)
    p.add_argument("--address", default=None, help="the Ray cluster (default: auto, or RAY_ADDRESS)")
    p.add_argument(
        "--dir", default=None, help=f"the run's {sc.ENV_DIR} on the nodes (default: ${sc.ENV_DIR} or {DEFAULT_DIR})"
    )
    p.add_argument("--out", default="./verl-otel-gathered", help="where to lay them out (default: %(default)s)")
    p.add_argument("--max-bytes", type=positive_int, default=MAX_BYTES, help="per node (default: %(default)s)")
    p.add_argument("--max-total-bytes", type=positive_int, default=MAX_TOTAL_BYTES, help="all nodes (%(default)s)")
    p.add_argument("--timeout", type=positive_float, default=TIMEOUT_S, help="seconds in all (default: %(default)s)")
    return p


@dataclass
class Gathered:
    nodes: list[NodeFiles] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # one line per node left out, naming it
    written: dict[str, int] = field(default_factory=dict)  # host -> bytes laid out


def _read_node(data_dir: str, max_bytes: int) -> NodeFiles:
    """On the node (a Ray task): its host's name as the files carry it, and its files."""
    from verl_otel import config

    return collect(data_dir, max_bytes, config.hostname())


def gather(
    out: Path,
    data_dir: str,
    max_bytes: int = MAX_BYTES,
    max_total_bytes: int = MAX_TOTAL_BYTES,
    timeout_s: float = TIMEOUT_S,
) -> Gathered:
    """Every alive node's files into ``out`` (Ray is initialized by the caller). Never waits past ``timeout_s``."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    deadline = time.monotonic() + timeout_s
    result = Gathered()
    nodes = ray.nodes()
    for n in nodes:
        if not n.get("Alive"):
            result.skipped.append(f"node {n.get('NodeManagerHostname', '?')} ({n.get('NodeID', '?')}): dead, skipped")
    alive = [n for n in nodes if n.get("Alive")]
    per_node = max(1, min(max_bytes, max_total_bytes // max(1, len(alive))))
    task = ray.remote(num_cpus=0, max_retries=0)(_read_node)
    pending: dict[Any, str] = {}
    for n in alive:
        strategy = NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False)
        name = f"node {n.get('NodeManagerHostname', '?')} ({n.get('NodeManagerAddress', '?')})"
        pending[task.options(scheduling_strategy=strategy).remote(data_dir, per_node)] = name
    while pending:
        left = deadline - time.monotonic()
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, left))
        if not ready:
            break
        ref = ready[0]
        name = pending.pop(ref)
        try:
            result.nodes.append(ray.get(ref, timeout=max(0.1, deadline - time.monotonic())))
        except Exception as exc:  # noqa: BLE001 - a node that failed is named, the others are kept
            result.skipped.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}, skipped")
    for ref, name in pending.items():
        result.skipped.append(f"{name}: no answer within {timeout_s:g}s, skipped")
        ray.cancel(ref, force=True)
    result.nodes.sort(key=lambda node: node.host)
    result.written = lay_out(out, result.nodes)
    return result


def run(args: argparse.Namespace) -> int:
    data_dir = os.path.abspath(args.dir or os.environ.get(sc.ENV_DIR) or DEFAULT_DIR)
    out = Path(args.out)
    try:
        import ray
    except ImportError:
        print(f"{PROG}: Ray is not installed here", file=sys.stderr)
        return 2
    try:
        ray.init(address=args.address or "auto", logging_level=logging.ERROR, log_to_driver=False)
    except Exception as exc:  # noqa: BLE001 - no cluster: one line
        print(f"{PROG}: cannot join the Ray cluster at {args.address or 'auto'}: {exc}", file=sys.stderr)
        return 2
    try:
        got = gather(out, data_dir, args.max_bytes, args.max_total_bytes, args.timeout)
    finally:
        ray.shutdown()
    for node in got.nodes:
        cut = f", {len(node.cut)} cut to fit" if node.cut else ""
        left = f", {len(node.left)} left out" if node.left else ""
        print(f"{node.host}: {len(node.files)} files, {got.written.get(node.host, 0)} bytes{cut}{left}")
    for line in got.skipped:
        print(line)
    print(
        f"gathered {len(got.nodes)} node(s) into {out} (verl-otel doctor --dir {out}; "
        f"verl-otel slow-steps --file {out / sc.TRACES_FILE}; verl-otel push --dir {out})"
    )
    return 0 if got.nodes else 1
