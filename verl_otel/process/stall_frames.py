"""The stacks of a stalled process, read in-process (``sys._current_frames()``: no privileges, no I/O), and
what they say: the innermost frame in verl's or the user's code, and the kind of stall.

Plain values only (file name, line, function), so the evidence writer and the doctor need no frame objects.
"""

from __future__ import annotations

import gc
import inspect
import os
import re
import sys
import sysconfig
import threading
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from verl_otel import semconv as sc

MAX_FRAMES = 120  # per thread, innermost kept
Frame = tuple[str, int, str]  # file name, line, function


@dataclass(frozen=True)
class ThreadStack:
    ident: int
    name: str
    frames: tuple[Frame, ...]  # outermost first


def capture(max_frames: int = MAX_FRAMES) -> list[ThreadStack]:
    """Every thread's Python stack in this process."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        summary = traceback.extract_stack(frame, limit=max_frames)
        frames = tuple((fs.filename, fs.lineno or 0, fs.name) for fs in summary)
        out.append(ThreadStack(ident, names.get(ident, f"thread-{ident}"), frames))
    return out


def _stdlib_dirs() -> tuple[str, ...]:
    dirs = {sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib")}
    return tuple(os.path.join(d, "") for d in dirs if d)


_STDLIB = _stdlib_dirs()
_SEP = os.sep
#: third-party code that is never where a user's or verl's call is stuck (their callers are)
_SKIP_PARTS = tuple(
    f"{_SEP}{p}{_SEP}"
    for p in ("ray", "wrapt", "opentelemetry", "grpc", "uvloop", "concurrent", "asyncio", "threading", "importlib")
)
_OURS = f"{_SEP}verl_otel{_SEP}"
_OUR_DEMO = f"{_SEP}verl_otel{_SEP}demo{_SEP}"  # the demo's planted code stands for the user's
_SITE = ("site-packages", "dist-packages")
_VERL = f"{_SEP}verl{_SEP}"
_LIB_PYTHON = re.compile(r"[/\\]lib(64)?[/\\]python\d+(\.\d+)?[/\\]")


def is_relevant(filename: str) -> bool:
    """A frame of verl's or the user's code (not the standard library, the event loop, Ray or us)."""
    if filename.startswith("<"):
        return False
    if _OUR_DEMO in filename:
        return True
    if _OURS in filename or any(p in filename for p in _SKIP_PARTS):
        return False
    if any(s in filename for s in _SITE):  # installed packages: only verl's own
        return _VERL in filename
    # the standard library (a venv's "platstdlib" is its own lib/pythonX.Y, site-packages checked above)
    return not filename.startswith(_STDLIB) and _LIB_PYTHON.search(filename) is None


def frame_text(frame: Frame) -> str:
    """``compute_score (my_reward.py:12)``."""
    filename, line, func = frame
    return f"{func} ({os.path.basename(filename)}:{line})"


def await_chain(coro: Any, name: str) -> ThreadStack | None:
    """The await chain from ``coro`` down (a coroutine suspended in ``await`` is on no thread's stack), outermost
    first: the agent-loop sample or reward call that entered the watch, or the verl coroutine a hook awaits."""
    try:
        out = list[Frame]()
        while coro is not None and len(out) < MAX_FRAMES:
            frame = _first(coro, ("cr_frame", "ag_frame", "gi_frame"))
            if frame is None:
                # ``async for`` awaits the generator's asend object, which names its generator only to the GC
                gen = _asend_generator(coro)
                if gen is None:
                    break
                coro = gen
                continue
            out.append((frame.f_code.co_filename, frame.f_lineno or 0, frame.f_code.co_name))
            coro = _first(coro, ("cr_await", "ag_await", "gi_yieldfrom"))
        return ThreadStack(TASK_IDENT, name, tuple(out)) if out else None
    except Exception:  # noqa: BLE001 - a coroutine that finished meanwhile: no chain
        return None


def task_stack(task: Any) -> ThreadStack | None:
    """An asyncio task's await chain (see :func:`await_chain`)."""
    return await_chain(task.get_coro(), f"asyncio task {task.get_name()}")


_ASEND = ("async_generator_asend", "async_generator_athrow")


def _asend_generator(obj: Any) -> Any:
    if type(obj).__name__ not in _ASEND:
        return None
    return next((r for r in gc.get_referents(obj) if inspect.isasyncgen(r)), None)


def _first(obj: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        val = getattr(obj, name, None)
        if val is not None:
            return val
    return None


TASK_IDENT = 0  # the ident of a task's await chain among the thread stacks


def innermost(stacks: Iterable[ThreadStack], prefer: int | None = None) -> tuple[Frame | None, ThreadStack | None]:
    """The innermost relevant frame: in the thread that entered the call (``prefer``) if it has one, else in
    the thread with the deepest relevant frame (an executor thread running a reward function while the
    event loop waits), else in the call's own await chain (a sample waiting on the engine). Our own threads
    are never it."""
    candidates = [s for s in stacks if not s.name.startswith("verl-otel")]
    candidates.sort(key=lambda s: (s.ident != prefer, s.ident == TASK_IDENT, -len(s.frames)))
    for stack in candidates:
        working = stack.frames if stack.ident in (prefer, TASK_IDENT) else _in_its_loop(stack.frames)
        for frame in reversed(working):
            if is_relevant(frame[0]):
                return frame, stack
    return None, None


def _in_its_loop(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """The frames an event loop thread runs now: those inside its loop's last ``_run_once``. Another thread idle in
    its loop (verl's TransferQueue bridge, ``_run_event_loop_forever``) is not where a call is stuck."""
    for i in range(len(frames) - 1, -1, -1):
        filename, _, func = frames[i]
        if func == "_run_once" and filename.endswith(_BASE_EVENTS):
            return frames[i + 1 :]
    return frames


_BASE_EVENTS = f"asyncio{_SEP}base_events.py"


#: what a stuck thread or task waits on, by the frames inside its innermost verl or user frame: another process'
#: call (a Ray call, an HTTP request to a server) rather than its own work
_WAIT_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (sc.STALL_WAIT_RAY, (f"{_SEP}ray{_SEP}",)),
    (sc.STALL_WAIT_HTTP, tuple(f"{_SEP}{p}" for p in ("aiohttp", "httpx", "httpcore", "urllib3", "requests", "http"))),
)

#: frames that look like a wait on another process but are this process' part of a collective (verl's NCCL checkpoint
#: engine broadcasts through Ray's collective library): its own work, as a torch.distributed collective is
_COLLECTIVE_PARTS = (f"{_SEP}ray{_SEP}util{_SEP}collective{_SEP}",)
#: verl's own frames that wait on other processes without a Ray or HTTP frame inside (a sleep between polls)
_WAIT_FUNCS: dict[str, str] = {"_wait_for_next_poll": sc.STALL_WAIT_POLL}  # v1's ReplayBuffer, for samples


def waiting_on(stack: ThreadStack | None) -> str:
    """What the stuck stack waits on (semconv STALL_WAIT_*), "" when it is doing the work itself: a Ray
    ``get``/``wait`` or an HTTP request inside its innermost verl or user frame, a verl frame known to poll for
    other processes' results, or an asyncio task suspended in ``await`` (no thread runs its code: it waits on
    what it awaits). A collective (Ray's collective library included) is the process' own work."""
    if stack is None:
        return ""
    inner: list[str] = []
    for filename, _, func in reversed(stack.frames):
        if is_relevant(filename):
            if func in _WAIT_FUNCS and _VERL in filename:
                return _WAIT_FUNCS[func]
            break
        inner.append(filename)
    if any(p in fn for fn in inner for p in _COLLECTIVE_PARTS):
        return ""
    for what, parts in _WAIT_PARTS:
        if any(p in fn for fn in inner for p in parts):
            return what
    return sc.STALL_WAIT_AWAIT if stack.ident == TASK_IDENT else ""


_FRAME_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # a weight sync waits on its transfer (verl's checkpoint engines: NCCL/NIXL/gloo broadcasts), not on storage
    (
        sc.STALL_COLLECTIVE,
        (
            *("torch/distributed", "nccl", "c10d", "collective", "all_reduce", "all_gather", "barrier"),
            *("checkpoint_engine", "send_weights", "receive_weights", "update_weights"),
        ),
    ),
    (sc.STALL_CHECKPOINT, ("checkpoint", "torch/serialization", "safetensors", "save_model", "load_model")),
    (sc.STALL_TOOL, ("verl/tools/", "tool_agent_loop", "sandbox", "tool_call")),
    (sc.STALL_DATA, ("torch/utils/data", "dataloader", "datasets/", "rl_dataset")),
    (sc.STALL_REWARD, ("reward_score", "reward_manager", "reward_loop", "compute_score", "reward")),
    (sc.STALL_ROLLOUT, ("workers/rollout", "vllm", "sglang", "agent_loop", "generate")),
)
#: installed packages whose frames tell the kind (torch's collectives and loaders, the engines)
_TELLING = tuple(f"{_SEP}{p}{_SEP}" for p in ("torch", "vllm", "sglang", "safetensors", "datasets"))
_CALL_KINDS: dict[str, str] = {
    sc.CALL_REWARD: sc.STALL_REWARD,
    sc.PHASE_REWARD: sc.STALL_REWARD,
    sc.CALL_AGENT_SAMPLE: sc.STALL_ROLLOUT,
    sc.CALL_SERVER_REQUEST: sc.STALL_ROLLOUT,
    sc.PHASE_ROLLOUT: sc.STALL_ROLLOUT,
    sc.PHASE_SAVE_CHECKPOINT: sc.STALL_CHECKPOINT,
    sc.PHASE_UPDATE_WEIGHTS: sc.STALL_COLLECTIVE,
    sc.CALL_WEIGHT_SEND: sc.STALL_COLLECTIVE,
    sc.SPAN_TOOL_PREFIX: sc.STALL_TOOL,  # a tool call's phase (hooks/agent_loop.py)
}


def classify(phase: str, frames: Iterable[Frame]) -> str:
    """The stall's kind (semconv STALL_*), from the innermost frames first, then from the phase or call."""
    relevant = [
        f"{fn.replace(os.sep, '/')}:{func}".lower()
        for fn, _, func in reversed(tuple(frames))
        if is_relevant(fn) or any(m in fn for m in _TELLING)
    ][:40]
    for kind, needles in _FRAME_KINDS:
        if any(n in t for t in relevant for n in needles):
            return kind
    return _CALL_KINDS.get(phase, sc.STALL_UNKNOWN)


def format_stacks(stacks: Iterable[ThreadStack]) -> str:
    """Python's traceback layout, one block per thread, innermost call last."""
    blocks = []
    for stack in stacks:
        what = "Awaiting" if stack.ident == TASK_IDENT else f"Thread {stack.ident}"
        lines = [f'{what} "{stack.name}" (most recent call last):']
        lines += [f'  File "{fn}", line {line}, in {func}' for fn, line, func in stack.frames]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"
