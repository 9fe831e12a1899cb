"""A synthetic step trace for ``verl-otel timeline``'s edge cases, written as OTLP/JSON lines (one request per
process, as each process' exporter writes them): the driver's phases with a gap, two training ranks (one whose
first span does not say its rank), three agent-loop workers (one done early: the long tail; one with more samples
than are spanned), a rollout replica's requests and a replica worker that never got a request, a process whose
process role is markup. ``goodput=True`` puts the GPU-time accounting's attributes on the step span."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from verl_otel import semconv as sc

S = 10**9
T0 = 1_700_000_000 * S
TRACE = "ab" * 16
_ids = itertools.count(1)
MARKUP_ROLE = "<b>evil</b>&role"
SAMPLES_PER_WORKER = (600, 40, 12)  # worker 0 ran more samples than it spanned
SPANNED = (300, 40, 12)


def _val(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": str(v)}


def _attrs(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _val(v)} for k, v in d.items()]


class Proc:
    def __init__(self, process_role: str, pid: int, index: int | None = None, host: str = "node-a") -> None:
        self.resource = {"service.name": "verl", sc.RES_PROCESS_ROLE: process_role, sc.RES_NODE: host, sc.RES_PID: pid}
        if index is not None:
            self.resource[sc.INDEX_OF_PROCESS_ROLE.get(process_role, sc.RES_DEPRECATED_WORKER_INDEX)] = index
        self.spans: list[dict[str, Any]] = []

    def span(self, name: str, start_s: float, end_s: float, parent: str = "", **attrs: Any) -> str:
        sid = f"{next(_ids):016x}"
        self.spans.append(
            {
                "traceId": TRACE,
                "spanId": sid,
                "parentSpanId": parent,
                "name": name,
                "startTimeUnixNano": str(T0 + int(start_s * S)),
                "endTimeUnixNano": str(T0 + int(end_s * S)),
                "attributes": _attrs(attrs),
            }
        )
        return sid

    def line(self) -> str:
        return json.dumps(
            {
                "resourceSpans": [
                    {"resource": {"attributes": _attrs(self.resource)}, "scopeSpans": [{"spans": self.spans}]}
                ]
            },
            separators=(",", ":"),
        )


GOODPUT = {"generating": 10.5, "long_tail": 3.25, "update_actor": 4.0, "idle": 1.0}


def write(path: Path, step: int = 5, goodput: bool = False, busy: dict[str, float] | None = None) -> Path:
    """``busy``: the buckets' measured busy share (NVML) on the step span too."""
    driver = Proc(sc.PROCESS_ROLE_TRAINER, 100)
    extra = {f"{sc.ATTR_GOODPUT_PREFIX}{k}": v for k, v in GOODPUT.items()} if goodput else {}
    extra.update({sc.busy_attr(k): v for k, v in (busy or {}).items()})
    if goodput:
        extra[sc.ATTR_STEP_GPU_SECONDS] = sum(GOODPUT.values())
    root = driver.span(sc.SPAN_STEP, 0, 8, **{sc.ATTR_GLOBAL_STEP: step, **extra})
    phases = {}
    for name, a, b in (("rollout", 0, 4), ("old_log_prob", 4.5, 5), ("update_actor", 5, 7), ("update_weights", 7, 7.3)):
        phases[name] = driver.span(name, a, b, root, **{sc.ATTR_PHASE: name})
    procs = [driver]
    for rank in (0, 1):
        w = Proc(sc.PROCESS_ROLE_WORKER, 200 + rank)
        if rank == 1:  # its first span says no rank: the lane is named by a later one
            w.span(sc.SPAN_WEIGHT_SYNC, 7.0, 7.25, phases["update_weights"])
        w.span(
            "worker.compute_log_prob",
            4.5,
            4.95,
            phases["old_log_prob"],
            **{sc.ATTR_WORKER_RANK: rank, sc.ATTR_WORKER_METHOD: "compute_log_prob"},
        )
        w.span(
            "worker.update_actor",
            5.0,
            6.9 - rank,
            phases["update_actor"],
            **{sc.ATTR_WORKER_RANK: rank, sc.ATTR_WORKER_METHOD: "update_actor"},
        )
        procs.append(w)
    for i, (n, spanned) in enumerate(zip(SAMPLES_PER_WORKER, SPANNED, strict=True)):
        a = Proc(sc.PROCESS_ROLE_AGENT_LOOP, 300 + i, index=i)
        end = 2.0 if i == 2 else 3.9  # worker 2 is done at 2 s: the long tail of the rest
        wid = a.span(
            sc.SPAN_ROLLOUT_WORKER,
            0.1,
            end,
            phases["rollout"],
            **{sc.ATTR_WORKER_INDEX: i, sc.ATTR_SAMPLES: n, sc.ATTR_SAMPLES_SPANNED: spanned, sc.ATTR_MODE: "train"},
        )
        for k in range(spanned):
            dur = 0.2 + (end - 0.3) * (k % 17) / 17
            a.span(sc.SPAN_ROLLOUT_SAMPLE, 0.1, 0.1 + dur, wid, **{sc.ATTR_SAMPLE_INDEX: k})
        procs.append(a)
    replica = Proc(sc.PROCESS_ROLE_ROLLOUT_SERVER, 400, index=0)
    for k in range(5):
        replica.span(sc.SPAN_ENGINE_REQUEST, 0.2 + k * 0.5, 0.6 + k * 0.5, **{sc.ATTR_ENGINE_REPLICA: 0})
    idle_replica = Proc(sc.PROCESS_ROLE_REPLICA_WORKER, 401, index=1)  # never got a request: only its weight receive
    idle_replica.span(sc.SPAN_WEIGHT_RECEIVE, 7.0, 7.2, phases["update_weights"])
    odd = Proc(MARKUP_ROLE, 500)
    odd.span(sc.SPAN_REWARD_WORKER, 3.0, 3.5, phases["rollout"])
    procs += [replica, idle_replica, odd]
    path.write_text("".join(p.line() + "\n" for p in procs))
    return path
