"""How a run ended, read back from its trace (``verl-otel doctor``): the last step span, its status and its run_end
attributes (semconv/run_end.py: the reason, which process, the phase, the detail), the exception's last frames,
what else of that step was in flight at that moment, and the signal notes of ``$VERL_OTEL_DIR/ends/``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis.step_traces import Span

MAX_FRAMES = 6
MAX_IN_FLIGHT = 20


@dataclass
class RunEnd:
    clean: bool  # the last step ended without an error
    step: int | None = None
    trace_id: str = ""
    reason: str = ""  # semconv RUN_END_REASONS ("" for a clean end)
    detail: str = ""
    phase: str = ""  # the innermost phase open when it ended
    process_role: str = ""  # the process that ended it (or was lost): process role, pid, host
    pid: int | None = None
    host: str = ""
    trainer: str = ""  # the step's own process: "<process role> pid on host"
    frames: list[str] = field(default_factory=list)  # the exception's last frames, innermost last
    in_flight: list[str] = field(default_factory=list)  # what else of the step was running then
    notes: list[dict[str, Any]] = field(default_factory=list)  # signals that reached a process of the run

    def as_dict(self, deprecated_names: bool = True) -> dict[str, Any]:
        """``doctor --json``'s object; ``role`` is process_role's old key, kept for a release (CHANGELOG.md)."""
        out = asdict(self)
        return out | {"role": self.process_role} if deprecated_names else out


def needed(span: Span) -> Span | None:
    return span if span.name in (sc.SPAN_STEP, sc.SPAN_STALL) else None


def _process(span: Span) -> str:
    r = span.resource
    return f"{r.get(sc.RES_PROCESS_ROLE, '?')} pid {r.get(sc.RES_PID, '?')} on {r.get(sc.RES_NODE, '?')}"


def _frames(span: Span) -> list[str]:
    for event in span.events:
        stack = str(event.attributes.get(sc.ATTR_EXC_STACKTRACE) or "")
        if stack:
            lines = [ln.strip() for ln in stack.splitlines() if ln.strip().startswith("File ")]
            return lines[-MAX_FRAMES:]
    return []


def last_step(spans: Iterable[Span]) -> Span | None:
    """The run's last step span (by its end)."""
    steps = [s for s in spans if s.name == sc.SPAN_STEP]
    return max(steps, key=lambda s: s.end_ns) if steps else None


def read(step: Span | None, trace: Iterable[Span] = (), notes: Iterable[dict[str, Any]] = ()) -> RunEnd | None:
    """The run's end from its last ``step`` span and the spans of that step's trace (None: no step at all)."""
    if step is None:
        return None
    a = step.attributes
    number = a.get(sc.ATTR_GLOBAL_STEP)
    end = RunEnd(
        clean=not step.status_error and sc.ATTR_RUN_END_REASON not in a,
        step=int(number) if isinstance(number, int) else None,
        trace_id=step.trace_id,
        trainer=_process(step),
    )
    if end.clean:
        return end
    end.reason = str(a.get(sc.ATTR_RUN_END_REASON) or sc.END_EXCEPTION)
    end.detail = str(a.get(sc.ATTR_RUN_END_DETAIL) or "")
    end.phase = str(a.get(sc.ATTR_RUN_END_PHASE) or "")
    end.process_role = str(
        a.get(sc.ATTR_RUN_END_PROCESS_ROLE)
        or a.get(sc.ATTR_DEPRECATED_RUN_END_ROLE)
        or step.resource.get(sc.RES_PROCESS_ROLE)
        or ""
    )
    pid = a.get(sc.ATTR_RUN_END_PID, step.resource.get(sc.RES_PID))
    end.pid = int(pid) if isinstance(pid, int) else None
    end.host = str(a.get(sc.ATTR_RUN_END_HOST) or step.resource.get(sc.RES_NODE) or "")
    end.frames = _frames(step)
    if not end.detail:  # an older trace: the exception event says what
        for event in step.events:
            kind = event.attributes.get(sc.ATTR_EXC_TYPE)
            if kind:
                message = str(event.attributes.get(sc.ATTR_EXC_MESSAGE) or "").strip()
                end.detail = f"{kind}: {message.splitlines()[0]}" if message else str(kind)
                break
    own = step.resource.get(sc.RES_PID)
    at = step.end_ns
    running = [
        s
        for s in trace
        if s.trace_id == step.trace_id
        and s.span_id != step.span_id
        and s.resource.get(sc.RES_PID) != own
        and s.start_ns <= at
        and s.end_ns >= at - 1_000_000_000  # still running within the last second
    ]
    running.sort(key=lambda s: s.start_ns)
    end.in_flight = [
        f"{s.name} in {_process(s)} ({s.seconds:.1f}s{', ERROR' if s.status_error else ''})"
        for s in running[:MAX_IN_FLIGHT]
    ]
    lo, hi = step.start_ns / 1e9 - 60, step.end_ns / 1e9 + 60
    end.notes = [n for n in notes if lo <= float(n.get("time") or 0) <= hi]
    return end


_HOW = {
    sc.END_INTERRUPTED: "interrupted (SIGINT, Ctrl-C)",
    sc.END_TERMINATED: "terminated (SIGTERM: a scheduler's time limit, or Ray ending the process)",
    sc.END_WORKER_LOST: "a worker process was lost (killed: SIGKILL, the OOM killer or a lost node)",
    sc.END_OOM: "out of memory (Ray's memory monitor or the kernel killed a worker)",
    sc.END_EXCEPTION: "an exception raised through fit()",
}


def render(end: RunEnd | None) -> list[str]:
    """The lines ``doctor`` prints first."""
    if end is None:
        return ["run end:   no step in the trace (the run ended before its first step, or wrote no trace)"]
    step = f"step {end.step}" if end.step is not None else "step ?"
    if end.clean:
        return [f"run end:   clean: the last step ({step}) ended without an error (trace {end.trace_id})"]
    where = f"{step}, phase {end.phase}" if end.phase else step
    who = f"{end.process_role or '?'} pid {end.pid if end.pid is not None else '?'} on {end.host or '?'}"
    out = [
        f"run end:   {_HOW.get(end.reason, end.reason)}, in {where}",
        f"   process:   {who}" + (f" (the step's process: {end.trainer})" if end.trainer not in who else ""),
        f"   how:       {end.reason}{': ' + end.detail if end.detail else ''}",
    ]
    for note in end.notes:
        who = f"{note.get('process_role', note.get('role'))} pid {note.get('pid')} on {note.get('host')}"
        out.append(f"   signal:    {note.get('signal')} reached the {who}")
    if end.frames:
        out.append("   last frames (innermost last):")
        out += [f"              {f}" for f in end.frames]
    if end.in_flight:
        out.append("   in flight elsewhere then:")
        out += [f"              {f}" for f in end.in_flight]
    else:
        out.append("   in flight elsewhere then: nothing the trace holds (a killed process' open spans die with it)")
    out.append(f"   trace:     {end.trace_id}")
    return out
