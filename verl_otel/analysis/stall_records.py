"""Reading a run's stall evidence back (``verl-otel doctor``): the files under ``$VERL_OTEL_DIR/stalls/`` and the
``stall`` spans of the traces, merged into one record per stall with what to do next."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis.step_traces import Span

MAX_FILES = 200  # files read (the newest), each at most MAX_BYTES
MAX_BYTES = 2 << 20


@dataclass
class StallRecord:
    phase: str
    call: str = ""
    step: int | None = None
    elapsed_s: float | None = None
    threshold_s: float | None = None
    frame: str = ""
    stack: list[str] = field(default_factory=list)  # innermost first
    kind: str = sc.STALL_UNKNOWN
    #: semconv STALL_WAIT_*: its stuck frame waits on another call; "": doing the work; None: not said (older)
    waiting_on: str | None = None
    waits_for: str = ""  # whom it waits on: the calls its process sent meanwhile ("1 train_worker call ...")
    process_role: str = ""
    pid: int | None = None
    host: str = ""
    evidence: str = ""
    capture: str = ""  # the sampling profile recorded while it was stuck (analysis/captures.py reads it)
    next_profile: str = ""  # VERL_OTEL_CAPTURE_NEXT=1: where verl's profiler wrote the next step's profile (a glob)
    repeats: int = 0  # stacks taken again after the first
    moved: bool | None = None  # did the innermost frame change between dumps
    trace_id: str = ""
    in_trace: bool = False  # its stall span was found
    detected_at: float | None = None  # unix seconds the stall was caught
    last_elapsed_s: float | None = None  # in flight this long at its last stack dump
    advice: str = ""

    def key(self) -> tuple[Any, ...]:
        # two hosts (containers, pods) may give one pid to two processes: the host keeps their stalls apart; the
        # file's name, not its folder: `verl-otel gather` brings a node's files to the head
        if self.evidence:
            return (self.host, os.path.basename(self.evidence))
        return (self.trace_id, self.phase, self.host, self.pid)

    def interval(self) -> tuple[float, float] | None:
        """When its call was seen in flight (unix seconds): from its start to its last stack dump."""
        if self.detected_at is None or self.elapsed_s is None:
            return None
        start = self.detected_at - self.elapsed_s
        return start, start + max(self.elapsed_s, self.last_elapsed_s or 0.0)

    def as_dict(self, deprecated_names: bool = True) -> dict[str, Any]:
        """``doctor --json``'s object; ``role`` is process_role's old key, kept for a release (CHANGELOG.md)."""
        out = asdict(self)
        return out | {"role": self.process_role} if deprecated_names else out


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_file(path: Path) -> StallRecord | None:
    """One evidence file (None when it is not one of ours)."""
    with open(path, "rb") as f:
        text = f.read(MAX_BYTES).decode(errors="replace")
    lines = text.splitlines()
    if not lines or lines[0] != sc.STALL_FILE_MAGIC:
        return None
    head: dict[str, str] = {}
    for line in lines[1:]:
        if not line.strip():
            break
        key, _, val = line.partition(": ")
        head[key.strip()] = val.strip()
    step = _num(head.get("step", ""))
    pid = _num(head.get("pid", ""))
    repeats = [ln for ln in lines if ln.startswith(sc.STALL_REPEAT_MARK)]
    again = [_num(ln[len(sc.STALL_REPEAT_MARK) :].split("s;")[0].replace("after", "").strip()) for ln in repeats]
    innermosts = {head.get("frame", "")} | {ln.rpartition("innermost: ")[2].strip("? ") for ln in repeats}
    return StallRecord(
        phase=head.get("phase", ""),
        call=head.get("call", ""),
        step=int(step) if step is not None and step >= 0 else None,
        elapsed_s=_num(head.get("elapsed_s", "")),
        threshold_s=_num(head.get("threshold_s", "")),
        frame=head.get("frame", ""),
        stack=[s for s in head.get("stack", "").split(" <- ") if s],
        kind=head.get("kind", sc.STALL_UNKNOWN),
        waiting_on=head.get("waiting_on"),
        waits_for=head.get("waits_for", ""),
        process_role=head.get("process_role", head.get("role", "")),  # "role": older files
        pid=int(pid) if pid is not None else None,
        host=head.get("host", ""),
        evidence=str(path),
        capture=head.get("capture", ""),
        next_profile=head.get("next_profile", ""),
        repeats=len(repeats),
        moved=(len(innermosts) > 1) if repeats else None,
        detected_at=_time(head.get("time", "")),
        last_elapsed_s=max((a for a in again if a is not None), default=None),
    )


def _time(text: str) -> float | None:
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def read_dir(stalls_dir: Path) -> list[StallRecord]:
    """Every evidence file under ``stalls_dir`` (the newest MAX_FILES); a missing folder is no stall."""
    try:
        entries = [e for e in os.scandir(stalls_dir) if e.name.endswith(sc.STALL_FILE_SUFFIX) and e.is_file()]
    except FileNotFoundError:
        return []
    entries.sort(key=lambda e: e.stat().st_mtime, reverse=True)
    out = []
    for entry in entries[:MAX_FILES]:
        try:
            rec = parse_file(Path(entry.path))
        except OSError:
            continue
        if rec is not None:
            out.append(rec)
    return out


def needed(span: Span) -> Span | None:
    """What :func:`from_spans` reads of a span (a trace file reader holds only these): stall spans, step spans."""
    return span if span.name in (sc.SPAN_STALL, sc.SPAN_STEP) else None


def from_spans(spans: Iterable[Span]) -> list[StallRecord]:
    """The ``stall`` spans, each with its step (from its trace's step span when it does not say it)."""
    spans = list(spans)
    steps = {s.trace_id: s.attributes.get(sc.ATTR_GLOBAL_STEP) for s in spans if s.name == sc.SPAN_STEP}
    out = []
    for s in spans:
        if s.name != sc.SPAN_STALL:
            continue
        a = s.attributes
        step = a.get(sc.ATTR_GLOBAL_STEP, steps.get(s.trace_id))
        out.append(
            StallRecord(
                phase=str(a.get(sc.ATTR_PHASE, "")),
                call=str(a.get(sc.ATTR_STALL_CALL, "")),
                step=int(step) if isinstance(step, (int, float)) and step >= 0 else None,
                elapsed_s=a.get(sc.ATTR_STALL_ELAPSED),
                threshold_s=a.get(sc.ATTR_STALL_THRESHOLD),
                frame=str(a.get(sc.ATTR_STALL_FRAME, "")),
                stack=[str(x) for x in a.get(sc.ATTR_STALL_STACK, ()) or ()],
                kind=str(a.get(sc.ATTR_STALL_KIND, sc.STALL_UNKNOWN)),
                waiting_on=str(a[sc.ATTR_STALL_WAITING_ON]) if sc.ATTR_STALL_WAITING_ON in a else None,
                waits_for=str(a.get(sc.ATTR_STALL_WAITS_FOR, "")),
                process_role=str(a.get(sc.ATTR_STALL_PROCESS_ROLE, "")),
                pid=a.get(sc.ATTR_STALL_PID),
                host=str(a.get(sc.ATTR_STALL_HOST, "")),
                evidence=str(a.get(sc.ATTR_STALL_EVIDENCE, "")),
                capture=str(a.get(sc.ATTR_STALL_CAPTURE, "")),
                next_profile=str(a.get(sc.ATTR_STALL_NEXT_PROFILE, "")),
                trace_id=s.trace_id,
                in_trace=True,
                detected_at=s.start_ns / 1e9 if s.start_ns else None,
            )
        )
    return out


def merge(files: list[StallRecord], traced: list[StallRecord]) -> list[StallRecord]:
    """One record per stall: a file and the span naming it are the same stall (the file says more, the span
    gives the trace and the step)."""
    by_key: dict[tuple[Any, ...], StallRecord] = {r.key(): r for r in files}
    for t in traced:
        rec = by_key.get(t.key())
        if rec is None:
            by_key[t.key()] = t
            continue
        rec.trace_id, rec.in_trace = t.trace_id, True
        rec.capture = rec.capture or t.capture
        rec.next_profile = rec.next_profile or t.next_profile
        if rec.step is None:
            rec.step = t.step
        rec.waiting_on = rec.waiting_on if rec.waiting_on is not None else t.waiting_on
        rec.waits_for = rec.waits_for or t.waits_for
        rec.detected_at = t.detected_at or rec.detected_at  # the span's clock is finer than the file's second
    out = list(by_key.values())
    for rec in out:
        rec.advice = advice(rec)
    out.sort(key=lambda r: (r.step if r.step is not None else -1, r.phase, r.process_role, r.host, r.pid or 0))
    return out


_ADVICE = {
    sc.STALL_REWARD: "the reward function did not return: give it a timeout (e.g. a deadline on its remote "
    "call, or verl's reward.reward_kwargs / sandbox timeouts) and make it return a score on failure",
    sc.STALL_COLLECTIVE: "a collective (NCCL/gloo) is waiting for a rank that is not there: compare the ranks' "
    "stacks; set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and TORCH_NCCL_TRACE_BUFFER_SIZE=2000 (flight recorder, "
    "TORCH_NCCL_DUMP_ON_TIMEOUT=1) and a shorter NCCL timeout so the hang becomes an error with a record",
    sc.STALL_ROLLOUT: "the rollout engine did not answer: look at the rollout server's own stall file and its "
    "vLLM/SGLang log (a stuck request, a dead engine core, KV cache exhausted)",
    sc.STALL_DATA: "the data loader is stuck: check the dataset's storage and dataloader workers "
    "(data.dataloader_num_workers=0 shows the stack in the trainer itself)",
    sc.STALL_CHECKPOINT: "checkpoint I/O is stuck: check the checkpoint directory's filesystem (space, a "
    "network mount that stopped answering)",
    sc.STALL_TOOL: "a tool call did not return: give the tool a timeout (the sandbox's or the tool's own)",
    sc.STALL_UNKNOWN: "read the stacks in the evidence file",
}


#: a weight sync's own transfer (its kind is collective): no rank is missing when both sides are caught in it
_WEIGHT_SYNC_ADVICE = (
    "the weight sync's transfer is slow or stuck: its weights.sync and weights.receive spans give the bytes and "
    "seconds of each part (gather, transfer, load); a replica that never joined holds the sender (compare their "
    "stacks); for NCCL, TORCH_NCCL_TRACE_BUFFER_SIZE=2000 records a stuck broadcast"
)


def advice(rec: StallRecord) -> str:
    text = _ADVICE.get(rec.kind, _ADVICE[sc.STALL_UNKNOWN])
    if rec.kind == sc.STALL_COLLECTIVE and rec.call in (sc.CALL_WEIGHT_SEND, sc.CALL_WEIGHT_RECEIVE):
        text = _WEIGHT_SYNC_ADVICE
    if rec.kind == sc.STALL_UNKNOWN and rec.waits_for:
        text = f"it waits on {rec.waits_for}: read that process' own stall evidence (its frame says where)"
    if rec.moved is False:
        text += "; the stacks did not move between dumps (a hang, not slow progress)"
    elif rec.moved:
        text += "; the innermost frame changed between dumps (slow progress rather than a hang?)"
    if not rec.frame:
        text += "; no verl or user frame in the Python stacks: the native stacks (py-spy dump --native --pid "
        f"{rec.pid or 'PID'}) tell where it waits"
    return text
