"""What a stall is (process/stalls.py's watch finds them): the record its evidence, span and console line say, the
calls the watch holds (in flight, and sent to other processes: whom a stalled call waits on), and the writers the
runtime hands the watch (export/: the evidence files, the captures)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from opentelemetry import context as otel_context


class Evidence(Protocol):
    """Writes the evidence files (export/stall_evidence.py::EvidenceFiles)."""

    def write(self, name: str, text: str) -> Path | None: ...

    def append(self, path: Path, text: str) -> bool: ...

    def native(self, pid: int) -> str: ...


class Capture(Protocol):
    """Starts a sampling profile of a stalled process (export/captures.py::Captures)."""

    def start(self, name: str, phase: str, pid: int, thread: int | None = None) -> tuple[str, str] | None: ...


@dataclass
class _Call:
    phase: str
    call: str
    step: int
    start: float
    thread: int
    parent: otel_context.Context | None
    task: Any = None  # the asyncio task that entered (its await chain is on no thread's stack)
    #: the coroutine the call awaits, where the task's own chain cannot be read (Ray runs an async actor method in
    #: a compiled coroutine, which shows no frame): the chain is read from here
    awaits: Any = None
    stalled: bool = False


@dataclass
class _Sent:
    """A call this process sent to other processes (a worker group's method): whom a stalled call waits on."""

    what: str  # e.g. "1 train_worker call compute_log_prob, rank 0"
    thread: int
    start: float
    blocking: bool  # the sender waits in the call itself (else on its futures, later in the same phase)


def sent_text(process_role: str, method: str, ranks: int | None) -> str:
    """``2 train_worker calls compute_log_prob, ranks 0-1`` (``ranks``: the group's size; None: not known)."""
    if not ranks:
        return f"{process_role} call {method}"
    which = "rank 0" if ranks == 1 else f"ranks 0-{ranks - 1}"
    return f"{ranks} {process_role} call{'s' if ranks > 1 else ''} {method}, {which}"


@dataclass
class Stall:
    """One stall of a phase (of a step) in this process: what its file, span and line say."""

    phase: str
    call: str
    step: int
    elapsed_s: float
    threshold_s: float
    frame: str
    kind: str
    evidence: str
    process_role: str
    pid: int
    host: str
    stack: tuple[str, ...] = ()  # verl's and the user's frames of the stuck thread, innermost first
    waiting_on: str = ""  # semconv STALL_WAIT_*: the stuck frame waits on another call ("": it does the work)
    capture: str = ""  # the sampling profile recorded while it was stuck ("": none)
    waits_for: str = ""  # whom: the calls it sent to other processes and waits on (sent_text), "; "-joined
    next_profile: str = ""  # VERL_OTEL_CAPTURE_NEXT: where verl's profiler writes the next step's profile
    dumps: int = 1
    last_dump: float = 0.0
    calls: set[int] = field(default_factory=set)
