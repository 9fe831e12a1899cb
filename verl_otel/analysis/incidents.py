"""One hang, one answer (``verl-otel doctor``): the stall records of a run grouped into incidents. A hang stalls
every process on the way to it (the trainer's phase, the agent-loop sample, the reward call); the stalls that
overlap in time (within a step when both know theirs) are one incident, whose root is the process stuck in its own
work (its frame waits on no other call: the reward function, the tool, the collective, the engine) and whose other
stalls are the processes waiting on it.

What waits is read in the stalled process itself (process/stall_frames.py ``waiting_on``: a Ray get, an HTTP
request or an ``await`` inside its innermost verl or user frame); records without it (older files or spans) fall
back to the depth of their process role in the call tree (the trainer calls the workers, which call the
reward worker and the rollout server). Processes are told apart by host and pid (the same pid on two nodes is
two processes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis.stall_records import StallRecord

#: clocks of two nodes and the evidence file's one-second times: intervals this close still overlap
SLACK_S = 2.0
#: how deep a process role's calls sit in the call tree: a deeper process is what a shallower one waits on
_DEPTH = {
    sc.PROCESS_ROLE_DRIVER: 0,
    sc.PROCESS_ROLE_TRAINER: 0,
    sc.PROCESS_ROLE_ROLLOUTER: 0,
    sc.PROCESS_ROLE_AGENT_LOOP: 1,
    sc.PROCESS_ROLE_WORKER: 1,
    sc.PROCESS_ROLE_OTHER: 1,
    sc.PROCESS_ROLE_REWARD: 2,
    sc.PROCESS_ROLE_ROLLOUT_SERVER: 2,
    # the trainer's checkpoint-engine manager calls the replicas' receive beside the actor workers' send
    sc.PROCESS_ROLE_REPLICA_WORKER: 1,
}


def waits_text(what: str | None) -> str:
    """``a Ray call`` for semconv's STALL_WAIT_RAY (what a waiter waits on, in words)."""
    return sc.STALL_WAIT_TEXT.get(what or "", what or "another call")


def waits_of(r: StallRecord) -> str:
    """Whom a waiter waits on, in words: the calls its process sent (``1 train_worker call compute_log_prob,
    rank 0``) when it said them, else what its frame waits in (``a Ray call``)."""
    return r.waits_for or waits_text(r.waiting_on)


@dataclass
class Incident:
    root: StallRecord
    waiting: list[StallRecord] = field(default_factory=list)  # stalled waiting on the root (directly or not)
    peers: list[StallRecord] = field(default_factory=list)  # stuck in their own work beside the root (other ranks)
    root_caught: bool = True  # False: every stall waits; the call they wait on was not caught as a stall

    @property
    def step(self) -> int | None:
        steps = [r.step for r in (self.root, *self.waiting, *self.peers) if r.step is not None]
        return self.root.step if self.root.step is not None else (min(steps) if steps else None)

    def records(self) -> list[StallRecord]:
        return [self.root, *self.peers, *self.waiting]

    def as_dict(self, deprecated_names: bool = True) -> dict[str, Any]:
        def brief(r: StallRecord) -> dict[str, Any]:
            out = {k: getattr(r, k) for k in _BRIEF}
            return out | {"role": r.process_role} if deprecated_names else out  # old key, for a release

        return {
            "step": self.step,
            "root": brief(self.root) | {"advice": self.root.advice},
            "root_caught": self.root_caught,
            "peers": [brief(r) for r in self.peers],
            "waiting": [brief(r) | {"waiting_on": r.waiting_on, "waits_for": r.waits_for} for r in self.waiting],
        }


#: a record's fields in an incident (doctor --json)
_BRIEF = ("process_role", "pid", "host", "phase", "call", "frame", "kind", "step", "evidence", "trace_id")


def _depth(r: StallRecord) -> int:
    return _DEPTH.get(r.process_role, 1)


def _same_step(a: StallRecord, b: StallRecord) -> bool:
    return a.step is None or b.step is None or a.step == b.step


def _overlap(a: StallRecord, b: StallRecord) -> float | None:
    """Seconds both were in flight (negative: apart by that much); None when either has no time."""
    ia, ib = a.interval(), b.interval()
    if ia is None or ib is None:
        return None
    return min(ia[1], ib[1]) - max(ia[0], ib[0])


def _together(a: StallRecord, b: StallRecord) -> bool:
    """One hang's stalls: the same trace or step (when both know it; a v1 sample's step is the one that submitted
    its prompt, its trace the step it runs in) and in flight at the same time (when both know when; without a
    time, the same trace or known step is enough)."""
    same_trace = bool(a.trace_id) and a.trace_id == b.trace_id
    if not same_trace and not _same_step(a, b):
        return False
    both = _overlap(a, b)
    if both is None:
        return same_trace or (a.step is not None and a.step == b.step)
    if (a.host, a.pid) == (b.host, b.pid) and a.call != b.call:
        return both > 0  # one process' calls one after the other (old_log_prob, then ref): one clock, no slack
    return both >= -SLACK_S


def _clusters(records: list[StallRecord]) -> list[list[StallRecord]]:
    """Records joined when any two of them are together (transitively), in the order of the first."""
    groups: list[list[StallRecord]] = []
    for rec in records:
        joined = [g for g in groups if any(_together(rec, x) for x in g)]
        merged = [rec] + [x for g in joined for x in g]
        groups = [g for g in groups if not any(g is j for j in joined)] + [merged]
    return groups


def _start(r: StallRecord) -> float:
    iv = r.interval()
    return iv[0] if iv else float("inf")


def _root_first(records: list[StallRecord]) -> list[StallRecord]:
    """The deepest first (what the others wait on), a weight sync's sender before its receivers (what they
    receive, it sends: in a slow collective both sides sit in the transfer), then the earliest started."""
    return sorted(records, key=lambda r: (-_depth(r), r.call == sc.CALL_WEIGHT_RECEIVE, _start(r), r.host, r.pid or 0))


def _fit(waiter: StallRecord, group: list[StallRecord]) -> tuple[int, float] | None:
    """How well a waiter fits an incident's roots: was a root in flight when the waiter was caught, then how long
    they overlapped; None when it fits none."""
    if not any(_together(waiter, r) for r in group):
        return None
    caught = waiter.detected_at
    inside = 0
    if caught is not None:
        for r in group:
            iv = r.interval()
            if iv is not None and iv[0] - SLACK_S <= caught <= iv[1] + SLACK_S:
                inside = 1
    return inside, max((_overlap(waiter, r) or 0.0) for r in group)


def group(records: list[StallRecord]) -> list[Incident]:
    """The incidents of a run's stall records (merged by analysis/stall_records.py::merge), the earliest first; each
    waiter's ``advice`` is replaced by a pointer to its root."""
    ordered = sorted(records, key=lambda r: (_start(r), r.step if r.step is not None else -1))
    waits = {id(r) for r in ordered if r.waiting_on}
    for cluster in _clusters([r for r in ordered if r.waiting_on is None]):  # not said: the shallower ones wait
        deepest = max(_depth(r) for r in cluster)
        waits |= {id(r) for r in cluster if _depth(r) < deepest}
    doers = [r for r in ordered if id(r) not in waits]
    waiters = [r for r in ordered if id(r) in waits]
    incidents = []
    for cluster in _clusters(doers):
        root, *peers = _root_first(cluster)
        inc = Incident(root, peers=[p for p in peers if _depth(p) == _depth(root)])
        inc.waiting = [p for p in peers if _depth(p) < _depth(root)]  # a wait its frames did not show: by the tree
        incidents.append(inc)
    orphans = []
    for w in waiters:
        fits = [(f, i) for i, inc in enumerate(incidents) if (f := _fit(w, [inc.root, *inc.peers])) is not None]
        if fits:
            incidents[max(fits)[1]].waiting.append(w)
        else:
            orphans.append(w)
    for cluster in _clusters(orphans):  # a hang whose stuck process was not caught: the deepest waiter leads
        root, *rest = _root_first(cluster)
        incidents.append(Incident(root, waiting=rest, root_caught=False))
    for inc in incidents:
        inc.waiting.sort(key=lambda r: (_depth(r), _start(r)), reverse=True)
        for w in inc.waiting:
            w.advice = (
                f"it waits ({waits_of(w)}) on this incident's root, {inc.root.process_role or '?'} pid "
                f"{inc.root.pid if inc.root.pid is not None else '?'}: see there"
            )
        if not inc.root_caught:
            inc.root.advice = (
                f"it waits on {waits_of(inc.root)} whose process was not caught stalled (not "
                f"instrumented, or below its own threshold): find who serves that call; {inc.root.advice}"
            )
    incidents.sort(key=lambda inc: (_start(inc.root), inc.step if inc.step is not None else -1))
    return incidents
