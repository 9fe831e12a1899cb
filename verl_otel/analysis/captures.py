"""Reading a capture back (``verl-otel capture``, ``doctor``): a speedscope-format sampling profile, as
``py-spy record --format speedscope`` and the in-process sampler (export/captures.py) write it, summed into its
hottest frames."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_otel import semconv as sc

MAX_BYTES = 64 * 2**20  # a capture larger than this is not read (the capture's own cap is lower)
TOP = 8


@dataclass
class Hot:
    frame: str  # "function (file:line)"
    samples: int
    share: float  # of the samples of the profiles summed


@dataclass
class CaptureSummary:
    path: str
    samples: int = 0
    threads: int = 0
    #: where the samples were, innermost frame first: each sample's innermost frame (where the time went)
    innermost: list[Hot] = field(default_factory=list)
    #: each sample's frames once (what the time was spent under), outer frames of every sample left out
    inclusive: list[Hot] = field(default_factory=list)
    thread: str = ""  # the profile summed (the stalled thread's), "" for all of them

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "samples": self.samples,
            "threads": self.threads,
            "thread": self.thread,
            "innermost": [vars(h) for h in self.innermost],
            "inclusive": [vars(h) for h in self.inclusive],
        }


class CaptureError(Exception):
    """Not a capture we can read (one line)."""


def _frame(f: Any) -> str:
    if not isinstance(f, dict):
        return "?"
    name, file, line = f.get("name") or "?", f.get("file"), f.get("line")
    if not file:
        return str(name)
    return f"{name} ({Path(str(file)).name}:{line})" if line else f"{name} ({Path(str(file)).name})"


def summarize(doc: Any, path: str = "", thread: int | None = None, top: int = TOP) -> CaptureSummary:
    """The hottest frames of a speedscope document. ``thread`` (a native thread id, as py-spy names its profiles
    ``Thread <id> "<name>"``): only that thread's profile; without it, the profile the capture marked as the
    stalled thread's (``activeProfileIndex``, where verl-otel set it), else every thread's."""
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles"), list):
        raise CaptureError("not a speedscope profile (no profiles)")
    frames = [_frame(f) for f in (doc.get("shared") or {}).get("frames") or []]
    every = [p for p in doc["profiles"] if isinstance(p, dict)]
    profiles = [p for p in every if p.get("type") == "sampled"]
    out = CaptureSummary(path, threads=len(profiles))
    focus = doc.get("activeProfileIndex") if doc.get(sc.CAPTURE_FOCUS_KEY) else None
    if thread is not None:
        mine = [p for p in profiles if str(p.get("name", "")).startswith(f"Thread {thread} ")]
    elif isinstance(focus, int) and 0 <= focus < len(every) and every[focus] in profiles:
        mine = [every[focus]]
    else:
        mine = []
    if mine:
        profiles, out.thread = mine, str(mine[0].get("name", ""))
    inner: dict[str, float] = defaultdict(float)
    incl: dict[str, float] = defaultdict(float)
    weight = 0.0
    for p in profiles:
        weights = p.get("weights") or []
        for i, stack in enumerate(p.get("samples") or []):
            if not isinstance(stack, list) or not stack:
                continue
            w = weights[i] if i < len(weights) and isinstance(weights[i], int | float) else 1
            names = [frames[k] if isinstance(k, int) and 0 <= k < len(frames) else "?" for k in stack]
            inner[names[-1]] += w  # speedscope: a sample's stack is outermost first
            for name in set(names):
                incl[name] += w
            out.samples += 1
            weight += w
    total = weight or 1.0
    ranked = sorted(inner.items(), key=lambda x: -x[1])[:top]
    out.innermost = [Hot(f, round(n / total * out.samples), n / total) for f, n in ranked]
    # the frames under which every sample sat (the thread's entry points) say nothing: left out
    under = sorted(incl.items(), key=lambda x: -x[1])
    keep = [(f, n) for f, n in under if n < total * 0.999 or len(incl) == 1][:top]
    out.inclusive = [Hot(f, round(n / total * out.samples), n / total) for f, n in keep]
    return out


def read(path: Path, thread: int | None = None, top: int = TOP) -> CaptureSummary:
    try:
        if path.stat().st_size > MAX_BYTES:
            raise CaptureError(f"{path}: larger than {MAX_BYTES >> 20} MiB, not read")
        doc = json.loads(path.read_bytes())
    except OSError as err:
        raise CaptureError(f"cannot read {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise CaptureError(f"{path}: not JSON ({err})") from None
    return summarize(doc, str(path), thread, top)


def to_text(s: CaptureSummary, indent: str = "") -> str:
    head = f"{s.samples} samples" + (f" of thread {s.thread}" if s.thread else f" over {s.threads} threads")
    lines = [f"{indent}{s.path}: {head}" if s.path else f"{indent}{head}", f"{indent}hottest (innermost frame):"]
    lines += [f"{indent}  {h.share:6.1%}  {h.frame}" for h in s.innermost]
    if s.inclusive:
        lines.append(f"{indent}under (a frame anywhere on the stack):")
        lines += [f"{indent}  {h.share:6.1%}  {h.frame}" for h in s.inclusive]
    return "\n".join(lines)


__all__ = ["CaptureError", "CaptureSummary", "Hot", "read", "summarize", "to_text"]
