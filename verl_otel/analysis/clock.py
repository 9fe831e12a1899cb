"""Hosts' clocks within one trace. A span's start and end come from one host's clock, so its duration is right
whatever the skew; but a child made on another host (a training worker's call under the trainer's phase, an
agent-loop worker's samples under the rollout) may seem to start before its parent or end after it when the two
hosts' clocks disagree (real hosts do; namespaces on one machine share a clock). The readers then:

- keep every span and every duration as measured (nothing is dropped or shortened);
- estimate one offset per host and trace, the smallest shift that puts each of its spans whose parent is on
  another host inside that parent (Jaeger's adjuster does the like), applied where times of two hosts are
  compared (a sample's end against the others', in the long tail);
- say it: ``StepTrace.clock_skew_s`` (the largest offset) and ``clock_offsets`` (host -> seconds), in
  ``slow-steps`` text and JSON, when past :data:`TOLERANCE_S`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from verl_otel import semconv as sc

TOLERANCE_S = 0.001  # a cross-host child within this of its parent's bounds is not skew (timer resolution)
MARGIN_S = 60.0  # a reader of a time window reads this much before it (children of skewed hosts), steps filtered


class _Timed(Protocol):
    @property
    def span_id(self) -> str: ...
    @property
    def parent_id(self) -> str: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def end_ns(self) -> int: ...
    @property
    def resource(self) -> dict[str, object]: ...


def host_of(span: _Timed) -> str:
    return str(span.resource.get(sc.RES_NODE) or "")


def offsets(spans: Iterable[_Timed]) -> dict[str, int]:
    """Host -> nanoseconds to add to its spans' times so that cross-host children sit inside their parents; only
    hosts whose offset passes TOLERANCE_S (the root's host is the reference: 0)."""
    spans = list(spans)
    by_id = {s.span_id: s for s in spans}
    edges: dict[str, list[tuple[_Timed, _Timed]]] = {}  # child's host -> (parent, child) across hosts
    for child in spans:
        parent = by_id.get(child.parent_id)
        if parent is None:
            continue
        ph, ch = host_of(parent), host_of(child)
        if ph and ch and ph != ch:
            edges.setdefault(ch, []).append((parent, child))
    if not edges:
        return {}
    roots = sorted((s for s in spans if s.parent_id not in by_id), key=lambda s: s.start_ns)
    known: dict[str, int] = {host_of(roots[0]): 0} if roots and host_of(roots[0]) else {}
    for _ in range(len(edges) + 1):  # a host is placed once a parent's host is; chains of hosts take a pass each
        placed = False
        for host, pairs in edges.items():
            usable = [(p, c) for p, c in pairs if host_of(p) in known]
            if host in known or not usable:
                continue
            low = max(p.start_ns + known[host_of(p)] - c.start_ns for p, c in usable)  # start after each parent's
            high = min(p.end_ns + known[host_of(p)] - c.end_ns for p, c in usable)  # end before each parent's
            known[host] = 0 if low <= 0 <= high else (low if low > 0 or low > high else high)
            placed = True
        if not placed:
            break
    tolerance = int(TOLERANCE_S * 1e9)
    return {h: off for h, off in known.items() if abs(off) > tolerance}
