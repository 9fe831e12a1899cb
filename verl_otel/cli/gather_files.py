"""What ``verl-otel gather`` takes of one node's ``$VERL_OTEL_DIR`` (run there, as a Ray task) and how it lays
the nodes' files out on the head so that ``doctor --dir``, ``slow-steps --file``, ``val-generations --file`` and
``push --dir`` read the gathered folder as they read one node's:

- ``OUT/traces.jsonl``: every node's trace files, each node's oldest first (OTLP/JSON lines: concatenated files
  are one valid file; each line names its host in its resource);
- ``OUT/stalls/``, ``OUT/unsent/``: the nodes' files, whose names carry their host (a name that is already there,
  from an older release, gets ``<host>-`` in front);
- ``OUT/hosts/<host>/``: the node's ``prometheus_targets.json`` and ``gather.json`` (what was brought, what left).

Bounded: a node brings at most ``max_bytes``, the evidence first (stalls, targets), then the unsent spans and the
trace files newest first; a line file past what is left is cut to its newest whole lines, other files are left."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from verl_otel import semconv as sc

MAX_FILES = 2000  # per node
_ROTATED = 1000  # traces.jsonl.N read up to this N


@dataclass
class NodeFiles:
    """One node's files (relative path -> bytes) and what was left out, as its task returns them."""

    host: str
    files: dict[str, bytes] = field(default_factory=dict)
    signatures: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (size, mtime_ns)
    cut: list[str] = field(default_factory=list)  # "path: kept N of M bytes"
    left: list[str] = field(default_factory=list)  # "path: why"
    nbytes: int = 0


def _candidates(root: Path) -> list[Path]:
    """The node's files in the order they are worth bringing."""
    out: list[Path] = []
    for sub in (sc.STALLS_DIR, sc.CAPTURES_DIR, sc.UNSENT_DIR):
        try:
            entries = sorted(os.scandir(root / sub), key=lambda e: e.stat().st_mtime, reverse=True)
        except OSError:
            entries = []
        paths = [Path(e.path) for e in entries if e.is_file(follow_symlinks=False)]
        if sub == sc.STALLS_DIR:
            out += paths
            out.append(root / sc.PROM_TARGETS_FILE)
        else:
            out += paths
    traces = root / sc.TRACES_FILE
    out += [traces, *(Path(f"{traces}.{i}") for i in range(1, _ROTATED))]  # newest first
    return out[: MAX_FILES + _ROTATED]


def _tail_lines(data: bytes, room: int) -> bytes:
    """The newest whole lines of ``data`` that fit in ``room`` bytes."""
    if room <= 0:
        return b""
    tail = data[-room:]
    if len(tail) < len(data):
        cut = tail.find(b"\n")
        tail = tail[cut + 1 :] if cut >= 0 else b""
    return tail


def collect(data_dir: str, max_bytes: int, host: str) -> NodeFiles:
    """Read this node's ``data_dir`` within ``max_bytes`` (runs on the node)."""
    root = Path(data_dir)
    out = NodeFiles(host=host)
    for path in _candidates(root):
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            continue
        rel = str(path.relative_to(root))
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        room = max_bytes - out.nbytes
        if st.st_size > room and not rel.endswith(".jsonl") and sc.TRACES_FILE not in rel:
            out.left.append(f"{rel}: {st.st_size} bytes, {max(room, 0)} left of --max-bytes")
            continue
        try:
            with open(path, "rb") as fh:
                data = fh.read(st.st_size) if st.st_size <= room else _tail_lines(fh.read(), room)
        except OSError as exc:
            out.left.append(f"{rel}: {exc.strerror or exc}")
            continue
        if len(data) < st.st_size:
            out.cut.append(f"{rel}: kept the newest {len(data)} of {st.st_size} bytes")
        if data:
            out.files[rel] = data
            out.signatures[rel] = (st.st_size, st.st_mtime_ns)
            out.nbytes += len(data)
    return out


def _trace_order(rel: str) -> int:
    """Oldest first: traces.jsonl.N ... traces.jsonl.1, traces.jsonl."""
    suffix = rel[len(sc.TRACES_FILE) + 1 :]
    return -int(suffix) if suffix.isdigit() else 0


def lay_out(out: Path, nodes: list[NodeFiles]) -> dict[str, int]:
    """Write the nodes' files into ``out`` (the layout above); a file two nodes both brought (a shared
    VERL_OTEL_DIR: same name, size and time) is written once. Returns bytes written per host."""
    seen: set[tuple[str, int, int]] = set()
    written: dict[str, int] = {}
    out.mkdir(parents=True, exist_ok=True)
    traces = out / sc.TRACES_FILE
    with open(traces, "wb") as merged:
        for node in nodes:
            host_dir = out / sc.HOSTS_DIR / _safe(node.host)
            host_dir.mkdir(parents=True, exist_ok=True)
            n = 0
            trace_files = sorted((r for r in node.files if r.startswith(sc.TRACES_FILE)), key=_trace_order)
            for rel in [*trace_files, *(r for r in node.files if not r.startswith(sc.TRACES_FILE))]:
                sig = (rel, *node.signatures.get(rel, (-1, -1)))
                if sig in seen:
                    continue
                seen.add(sig)
                data = node.files[rel]
                if rel.startswith(sc.TRACES_FILE):
                    merged.write(data if data.endswith(b"\n") else data + b"\n")
                elif rel == sc.PROM_TARGETS_FILE:
                    (host_dir / rel).write_bytes(data)
                else:
                    _place(out, rel, node.host).write_bytes(data)
                n += len(data)
            written[node.host] = n
            summary = {"host": node.host, "bytes": node.nbytes, "files": sorted(node.files), "cut": node.cut}
            (host_dir / "gather.json").write_text(json.dumps({**summary, "left": node.left}, indent=1))
    return written


def _place(out: Path, rel: str, host: str) -> Path:
    path = out / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():  # an older release's name without the host, already brought by another node
        path = path.with_name(f"{_safe(host)}-{path.name}")
    return path


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:64] or "unknown-host"


def as_dict(node: NodeFiles) -> dict[str, object]:
    return {k: v for k, v in asdict(node).items() if k != "files"}
