"""Stall detection: one watch per process, owned by the runtime (docs/guides/hangs.md).

A hooked call (a trainer phase, a training worker's method, a reward call, an agent-loop sample, a rollout
server request) tells the watch when it starts and ends: :meth:`StallWatch.enter` stores a start time in a
dict, :meth:`StallWatch.exit` pops it (no lock, no I/O: a training thread never waits here). One daemon
thread per process looks at the calls in flight every tick; a call past its threshold,
``min(seconds, max(min_seconds, factor x median of the phase's earlier runs))``, is a stall: the process
dumps its stacks to an evidence file (through the writer the runtime hands in), a ``stall`` span is ended at
once under the call's span and a flush is asked for, the gauge and counter change and the
``on_stall`` listener is told (the console line, verl_otel/progress/stall_line.py). The same stall is dumped
again every ``repeat_s`` seconds (does it move?), within bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from verl_otel import config as cfg
from verl_otel import semconv as sc
from verl_otel._log import warn_once
from verl_otel.config import StallSettings
from verl_otel.process import stall_frames as frames
from verl_otel.process.metrics import MetricStore, Reading
from verl_otel.process.stall_record import Capture, Evidence, Stall, _Call, _Sent

MAX_STALLS = 32  # stalls a process reports in a run (each: a file, a span)
MAX_DUMPS = 4  # stack dumps per stall (the first and the repeats), per phase and step
HISTORY = 64  # durations kept per phase for the median
MAX_SENT = 32  # calls to other processes remembered (whom a stalled call waits on), the oldest dropped


class StallWatch:
    def __init__(
        self,
        settings: StallSettings,
        *,
        tracer: Callable[[], trace.Tracer],
        store: MetricStore,
        flush_soon: Callable[[], None],
        evidence: Evidence | None,
        process_role: Callable[[], str],
        on_stall: Callable[[Stall], object] | None = None,
        capture: Capture | None = None,
        on_detect: Callable[[Stall], object] | None = None,
    ) -> None:
        self.settings = settings
        self._on_detect = on_detect  # before the record is written: may add to it (the next step's profile)
        self._capture = capture
        self._tracer, self._store, self._flush_soon = tracer, store, flush_soon
        self._evidence, self._process_role, self._on_stall = (
            evidence,
            process_role,
            on_stall,
        )  # on_stall: the console line (progress/)
        self._ids = itertools.count(1)
        self._calls: dict[int, _Call] = {}
        self._sent: dict[int, _Sent] = {}  # calls sent to other processes, in the order sent (bounded: MAX_SENT)
        self._history: dict[str, deque[tuple[int, float]]] = {}
        self._stalls: dict[tuple[str, Any], Stall] = {}
        self._phases: set[str] = set()  # phases that stalled here: their gauge goes back to 0, not away
        self._lock = threading.Lock()  # the watchdog's own stalls; enter/exit do not take it
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.pid, self.host = os.getpid(), cfg.hostname()
        self.tick_s = max(0.05, min(1.0, settings.min_seconds / 4, settings.seconds / 4))
        store.add_source(self.readings)

    # -- from the hooks (training threads): a dict entry, nothing else -----------------------------
    def enter(
        self,
        phase: str,
        call: str | None = None,
        step: int = -1,
        parent: Span | otel_context.Context | None = None,
        awaits: Coroutine[Any, Any, Any] | None = None,
    ) -> int | None:
        """A call of ``phase`` started (``call``: its own name, e.g. ``worker.update_actor``); returns the
        token for :meth:`exit`. ``parent``: the span (or context) its stall span goes under; ``awaits``: the
        coroutine the call awaits, whose chain a stall reads (else the running task's)."""
        if self._thread is None:
            self._start()
        token = next(self._ids)
        ctx = trace.set_span_in_context(parent) if isinstance(parent, Span) else parent
        task = asyncio.current_task() if asyncio._get_running_loop() is not None else None
        self._calls[token] = _Call(
            phase, call or phase, step, time.monotonic(), threading.get_ident(), ctx, task, awaits
        )
        return token

    def exit(self, token: int | None) -> None:
        if token is None:
            return
        c = self._calls.pop(token, None)
        if c is None:
            return
        hist = self._history.get(c.phase)
        if hist is None:
            hist = self._history.setdefault(c.phase, deque(maxlen=HISTORY))
        hist.append((c.step, time.monotonic() - c.start))

    def send(self, what: str, blocking: bool) -> int:
        """This thread sent a call to other processes (``what``: :func:`sent_text`); the token for
        :meth:`answered`. A call that stalls on this thread meanwhile says it waits on it."""
        token = next(self._ids)
        self._sent[token] = _Sent(what, threading.get_ident(), time.monotonic(), blocking)
        while len(self._sent) > MAX_SENT:
            with contextlib.suppress(StopIteration, KeyError, RuntimeError):
                self._sent.pop(next(iter(self._sent)))
        return token

    def answered(self, token: int | None) -> None:
        """The sending call returned: a blocking one was answered; a non-blocking one's futures are waited on
        later in the same phase, so it stays (until MAX_SENT newer calls push it out)."""
        sent = self._sent.get(token) if token is not None else None
        if sent is not None and sent.blocking:
            self._sent.pop(token, None)  # type: ignore[arg-type]

    def _waits_for(self, c: _Call) -> str:
        """The calls sent from ``c``'s thread since it started: what it waits on (the unanswered first); else the
        blocking calls still out from other threads (verl runs a coroutine's calls in a pool thread when its loop
        is busy)."""
        since = [x for x in list(self._sent.values()) if x.start >= c.start]
        mine = [x for x in since if x.thread == c.thread] or [x for x in since if x.blocking]
        seen: dict[str, None] = {}
        for x in sorted(mine, key=lambda x: (not x.blocking, -x.start)):
            seen.setdefault(x.what, None)
        return "; ".join(list(seen)[:3])

    def stalls_in(self, step: int) -> int:
        """Stalls this process detected in ``step`` (the step span's count)."""
        with self._lock:
            return sum(1 for s in self._stalls.values() if s.step == step)

    def stalls(self) -> list[Stall]:
        with self._lock:
            return list(self._stalls.values())

    def readings(self) -> Iterable[Reading]:
        stalled = {c.phase for c in list(self._calls.values()) if c.stalled}
        for phase in sorted(self._phases):
            yield sc.STALL_ACTIVE, (phase,), 1.0 if phase in stalled else 0.0

    def threshold(self, phase: str, step: int) -> float:
        hist = self._history.get(phase)
        earlier = [d for s, d in list(hist or ()) if step < 0 or s < step]
        return self.settings.threshold(statistics.median(earlier) if earlier else None)

    # -- the watchdog thread -----------------------------------------------------------------------
    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="verl-otel-stall-watch", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.check()
            except Exception as exc:  # noqa: BLE001 - the watchdog never dies of a telemetry error
                warn_once("stall-watch", f"stall detection failed ({exc!r}); it goes on")

    def check(self, now: float | None = None) -> list[Stall]:
        """One look at the calls in flight (the watchdog's tick); returns the stalls found or dumped again."""
        now = time.monotonic() if now is None else now
        touched = []
        limits: dict[tuple[str, int], float] = {}  # one median per phase and step per tick, however many calls
        for token, c in self._past_floor(now):
            elapsed = now - c.start
            limit = limits.get((c.phase, c.step))
            if limit is None:
                limit = limits[(c.phase, c.step)] = self.threshold(c.phase, c.step)
            if elapsed < limit:
                continue
            key = (c.phase, c.step if c.step >= 0 else _trace_of(c.parent))
            with self._lock:
                stall = self._stalls.get(key)
            if stall is None:
                if len(self._stalls) >= MAX_STALLS:
                    warn_once("stall-cap", f"more than {MAX_STALLS} stalls in pid {self.pid}: no more evidence")
                    continue
                stall = self._detect(c, elapsed, limit, now)
                with self._lock:
                    self._stalls[key] = stall
                touched.append(stall)
            stall.calls.add(token)
            c.stalled = True
        # repeats are per stall, once per tick: any of its calls still in flight
        for stall in self.stalls():
            live = [x for x in (self._calls.get(t) for t in list(stall.calls)) if x is not None]
            if len(live) < len(stall.calls):  # the calls that ended are forgotten
                stall.calls = {t for t in stall.calls if t in self._calls}
            call = live[0] if live else None
            if (
                call is not None
                and stall not in touched
                and stall.dumps < MAX_DUMPS
                and now - stall.last_dump >= self.settings.repeat_s
            ):
                self._dump_again(stall, call, now - call.start, now)
                touched.append(stall)
        return touched

    def _past_floor(self, now: float) -> list[tuple[int, _Call]]:
        """The calls in flight for longer than any threshold can be. They are first: the dict holds the calls in the
        order they started (tokens count up; two threads may swap calls that started microseconds apart), so the walk
        stops at the first younger one and a tick costs the old calls, not every sample in flight (100k in flight:
        17 ms a tick when each was looked at)."""
        floor = min(self.settings.seconds, self.settings.min_seconds)
        try:
            old = []
            for token, c in self._calls.items():
                if now - c.start < floor:
                    break
                old.append((token, c))
            return old
        except RuntimeError:
            # a tuple made mid-walk can start a garbage collection whose finalizers let a sample's thread change the
            # dict ("dictionary changed size during iteration", seen with 100k in flight): walk a copy (dict.copy
            # runs no Python code)
            return [(t, c) for t, c in self._calls.copy().items() if now - c.start >= floor]

    def _detect(self, c: _Call, elapsed: float, limit: float, now: float) -> Stall:
        stacks = self._stacks(c)
        frame, stack = frames.innermost(stacks, c.thread)
        kind = frames.classify(c.phase if c.call == c.phase else c.call, stack.frames if stack else ())
        if kind == sc.STALL_UNKNOWN and c.call != c.phase:
            kind = frames.classify(c.phase, ())
        process_role = self._process_role()
        stall = Stall(
            c.phase,
            c.call,
            c.step,
            elapsed,
            limit,
            frames.frame_text(frame) if frame else "",
            kind,
            "",
            process_role,
            self.pid,
            self.host,
            stack=tuple(frames.frame_text(f) for f in reversed(stack.frames) if frames.is_relevant(f[0]))[:12]
            if stack
            else (),
            waiting_on=frames.waiting_on(stack),
            waits_for=self._waits_for(c),
            last_dump=now,
        )
        self._phases.add(c.phase)
        self._store.inc(sc.STALLS_TOTAL, (c.phase,))
        step = f"step{c.step}" if c.step >= 0 else "step-unknown"
        name = f"{step}-{c.phase}-{process_role}-{self.host}-{self.pid}"  # two hosts, one pid: two files
        if c.step < 0:  # one stall per phase and trace: the next step's must not replace this one's file
            name += f"-{_trace_of(c.parent):032x}"[:9]
        if self._on_detect is not None:
            with contextlib.suppress(Exception):  # a listener never stops the watchdog
                self._on_detect(stall)
        if self._capture is not None:  # while it is stuck: started first, the evidence's header names it
            # the profile opens on the thread the stuck frame is on (an executor's, for a reward call run off the
            # event loop; the calling thread's without one); a coroutine waiting in await is on no thread: all
            on = c.thread if stack is None else (None if stack.ident == frames.TASK_IDENT else stack.ident)
            self._start_capture(stall, c, name, on)
        if self._evidence is not None:
            first = [stack] if stack is not None else []  # the stuck thread first: the cap cuts the others
            rest = [x for x in stacks if x is not stack]
            path = self._evidence.write(name, self._header(stall) + frames.format_stacks(first + rest))
            if path is not None:
                stall.evidence = str(path)
                self._evidence.append(
                    path, "\n# native stacks (py-spy dump --native)\n" + self._evidence.native(self.pid)
                )
        self._span(stall, c)
        if self._on_stall is not None:
            with contextlib.suppress(Exception):  # a listener never stops the watchdog
                self._on_stall(stall)
        return stall

    def _start_capture(self, stall: Stall, c: _Call, name: str, thread: int | None) -> None:
        assert self._capture is not None
        got = self._capture.start(name, c.phase, self.pid, thread)
        if got is None:
            return
        stall.capture, tool = got
        self._store.inc(sc.CAPTURES_TOTAL, (c.phase,))
        span = trace.get_current_span(c.parent) if c.parent is not None else None
        if span is not None and span.is_recording():  # the stalled call's span: a capture ran in it
            attrs = {sc.ATTR_CAPTURE_FILE: stall.capture, sc.ATTR_CAPTURE_TOOL: tool}
            span.add_event(sc.EVENT_CAPTURE, {**attrs, sc.ATTR_STALL_PID: self.pid, sc.ATTR_STALL_HOST: self.host})

    def _dump_again(self, stall: Stall, c: _Call, elapsed: float, now: float) -> None:
        stall.dumps += 1
        stall.last_dump = now
        if self._evidence is None or not stall.evidence:
            return
        stacks = self._stacks(c)
        frame, _ = frames.innermost(stacks, c.thread)
        where = frames.frame_text(frame) if frame else ""
        text = f"\n{sc.STALL_REPEAT_MARK} after {elapsed:.0f}s; innermost: {where}\n"
        self._evidence.append(Path(stall.evidence), text + frames.format_stacks(stacks))

    def _stacks(self, c: _Call) -> list[frames.ThreadStack]:
        if c.awaits is not None:
            chain = frames.await_chain(c.awaits, f"awaited by {c.call}")
        else:
            chain = frames.task_stack(c.task) if c.task is not None else None
        return ([chain] if chain else []) + frames.capture()

    def _header(self, s: Stall) -> str:
        rows = {
            "phase": s.phase,
            "call": s.call,
            "step": s.step,
            "elapsed_s": f"{s.elapsed_s:.1f}",
            "threshold_s": f"{s.threshold_s:.1f}",
            "frame": s.frame,
            "stack": " <- ".join(s.stack),
            "kind": s.kind,
            "waiting_on": s.waiting_on,
            "capture": s.capture,
            "waits_for": s.waits_for,
            "next_profile": s.next_profile,
            "process_role": s.process_role,
            "pid": s.pid,
            "host": s.host,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        return sc.STALL_FILE_MAGIC + "\n" + "".join(f"{k}: {v}\n" for k, v in rows.items()) + "\n"

    def _span(self, s: Stall, c: _Call) -> None:
        attrs: dict[str, Any] = {
            sc.ATTR_PHASE: s.phase,
            sc.ATTR_STALL_CALL: s.call,
            sc.ATTR_STALL_ELAPSED: round(s.elapsed_s, 3),
            sc.ATTR_STALL_THRESHOLD: round(s.threshold_s, 3),
            sc.ATTR_STALL_FRAME: s.frame,
            sc.ATTR_STALL_STACK: list(s.stack),
            sc.ATTR_STALL_KIND: s.kind,
            sc.ATTR_STALL_WAITING_ON: s.waiting_on,
            sc.ATTR_STALL_WAITS_FOR: s.waits_for,
            sc.ATTR_STALL_EVIDENCE: s.evidence,
            sc.ATTR_STALL_CAPTURE: s.capture,
            sc.ATTR_STALL_NEXT_PROFILE: s.next_profile,
            sc.ATTR_STALL_PROCESS_ROLE: s.process_role,
            sc.ATTR_STALL_PID: s.pid,
            sc.ATTR_STALL_HOST: s.host,
        }
        if s.step >= 0:
            attrs[sc.ATTR_GLOBAL_STEP] = s.step
        ctx = c.parent if c.parent is not None else otel_context.Context()
        self._tracer().start_span(sc.SPAN_STALL, context=ctx, attributes=attrs).end()
        self._flush_soon()


def _trace_of(ctx: otel_context.Context | None) -> int:
    """The trace a call of an unknown step belongs to (its stalls are one per phase and trace)."""
    return 0 if ctx is None else trace.get_current_span(ctx).get_span_context().trace_id
