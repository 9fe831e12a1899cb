"""``verl-otel doctor``: what a stuck (or killed) run left behind, explained: first how the run ended (cleanly, or
which process ended it, in which phase of which step, how, and what else was in flight then), then per stall,
which phase of which step, which process on which node, where it is stuck (verl's and the user's frames), what
kind of stall it is and what to do next. Reads the evidence files ($VERL_OTEL_DIR/stalls/), the signal notes
($VERL_OTEL_DIR/ends/) and the ``step`` and ``stall`` spans of the trace file (``--dir``, default
$VERL_OTEL_DIR) or of Jaeger (``--jaeger URL``)."""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from verl_otel import config
from verl_otel import semconv as sc
from verl_otel.analysis import captures, incidents, run_end, stall_records
from verl_otel.analysis.jaeger import JaegerClient, JaegerError
from verl_otel.analysis.jaeger_pages import walk
from verl_otel.analysis.otlp_json import read_file
from verl_otel.cli.spans import DEFAULT_DIR, fail, parse_since
from verl_otel.export.run_end import read_notes

PROG = "verl-otel doctor"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("doctor", help="explain a stuck run from its stall evidence", description=__doc__)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--dir", metavar="DIR", help=f"the run's data folder (default: ${sc.ENV_DIR} or {DEFAULT_DIR})")
    src.add_argument("--jaeger", metavar="URL", help="read the stall spans from Jaeger, e.g. http://localhost:16686")
    p.add_argument("--service", default=sc.SERVICE_NAME_DEFAULT, help="service.name in Jaeger (default: %(default)s)")
    p.add_argument("--since", type=parse_since, default=parse_since("7d"), metavar="WINDOW", help="Jaeger window")
    p.add_argument("--json", action="store_true", help="print JSON: {run_end: ..., incidents: [...], stalls: [...]}")
    return p


def _read(args: argparse.Namespace) -> tuple[list[stall_records.StallRecord], run_end.RunEnd | None, str]:
    if args.jaeger:
        client = JaegerClient(args.jaeger)
        now = time.time_ns()
        # a page at a time (analysis/jaeger_pages.py), each kept only for its stall and step spans
        spans = []
        for name in (sc.SPAN_STALL, sc.SPAN_STEP):
            pages = walk(client, args.service, now - int(args.since * 1e9), now, name)
            spans += [s for page in pages for s in page if s.name == name]
        end = run_end.read(run_end.last_step(spans))
        return stall_records.merge([], stall_records.from_spans(spans)), end, f"Jaeger at {client.base}"
    root = Path(args.dir or os.environ.get(sc.ENV_DIR) or DEFAULT_DIR)
    if not root.is_dir():
        raise OSError(f"{root} is not a folder (the run's {sc.ENV_DIR})")
    files = stall_records.read_dir(root / sc.STALLS_DIR)
    traced: list[stall_records.StallRecord] = []
    end = None
    trace_file = root / sc.TRACES_FILE
    if trace_file.exists():
        spans = read_file(trace_file, keep=stall_records.needed).spans
        traced = stall_records.from_spans(spans)
        step = run_end.last_step(spans)
        # the ended step's whole trace, for what else was in flight then (a second pass keeps that trace only)
        trace_id = step.trace_id if step is not None else ""
        trace = read_file(trace_file, keep=lambda s: s if s.trace_id == trace_id else None).spans if trace_id else []
        end = run_end.read(step, trace, read_notes(root))
    return stall_records.merge(files, traced), end, str(root)


def render(
    records: list[stall_records.StallRecord], source: str, end: run_end.RunEnd | None = None, root: Path | None = None
) -> str:
    first = "\n".join(run_end.render(end)) + "\n\n"
    if not records:
        return first + (
            f"no stall in {source}: no evidence files and no stall spans (the run never stalled, or ran with "
            f"{sc.ENV_STALL}=0)\n"
        )
    told = render_incidents(incidents.group(records), source)
    out = [first + told[0], *told[1:]]
    out.append(f"\n{len(records)} stall{'s' * (len(records) != 1)} in {source}:")
    for i, r in enumerate(records, 1):
        step = f"step {r.step}" if r.step is not None else "step ?"
        call = f" ({r.call})" if r.call and r.call != r.phase else ""
        took = ""
        if r.elapsed_s is not None and r.threshold_s is not None:
            took = f", {r.elapsed_s:.0f}s in flight when caught (threshold {r.threshold_s:.0f}s)"
        out.append(f"\n{i}. {step}, phase {r.phase}{call}{took}")
        pid = r.pid if r.pid is not None else "?"
        out.append(f"   process:   {r.process_role or '?'} pid {pid} on {r.host or '?'}")
        out.append(f"   stuck at:  {r.frame or '(no verl or user frame in the Python stacks)'}")
        for frame in r.stack[1:6]:
            out.append(f"              <- {frame}")
        out.append(f"   kind:      {r.kind}")
        if r.waits_for:
            out.append(f"   waits on:  {r.waits_for}")
        if r.evidence:
            again = f" (stacks taken {r.repeats} more time{'s' * (r.repeats != 1)})" if r.repeats else ""
            out.append(f"   evidence:  {r.evidence}{again}")
        if r.capture:
            out += _capture_lines(r.capture, root)
        if r.next_profile:
            out.append(_next_profile_line(r.next_profile))
        if r.trace_id:
            out.append(f"   trace:     {r.trace_id}")
        out.append(f"   next:      {r.advice}")
    return "\n".join(out) + "\n"


def _capture_lines(path: str, root: Path | None) -> list[str]:
    """Where a stall's capture is and its hottest frames (the file where it was written, or where `verl-otel
    gather` brought it)."""
    here = Path(path)
    if not here.is_file() and root is not None:
        here = root / sc.CAPTURES_DIR / Path(path).name
    try:
        got = captures.read(here, top=3)
    except captures.CaptureError:
        return [f"   capture:   {path} (not readable here: still recording, or on another host: verl-otel gather)"]
    lines = [f"   capture:   {here} ({got.samples} samples; verl-otel capture FILE, or speedscope in a browser)"]
    return lines + [f"              {h.share:6.1%}  {h.frame}" for h in got.innermost]


def _next_profile_line(where: str) -> str:
    """The next step's profile by verl's own profiler (VERL_OTEL_CAPTURE_NEXT=1): its files where they are."""
    found = sorted(glob.glob(where))
    if not found:
        return f"   next step: verl's profiler writes {where} (not here: not written yet, or on the workers' hosts)"
    more = f" and {len(found) - 1} more" if len(found) > 1 else ""
    return f"   next step: verl's profiler wrote {found[0]}{more} (chrome://tracing or Perfetto opens it)"


def _who(r: stall_records.StallRecord) -> str:
    host = f" on {r.host}" if r.host else ""
    return f"{r.process_role or '?'} pid {r.pid if r.pid is not None else '?'}{host}"


def render_incidents(found: list[incidents.Incident], source: str) -> list[str]:
    """One paragraph per hang: its root, what to do, who waited on it (the stalls follow, in detail)."""
    out = [f"{len(found)} incident{'s' * (len(found) != 1)} in {source}:"]
    for i, inc in enumerate(found, 1):
        r = inc.root
        step = f"step {inc.step}" if inc.step is not None else "step ?"
        out.append(f"\n{i}. {step}: {_who(r)} stuck in {r.call or r.phase} at {r.frame or '(no Python frame)'}")
        uncaught = "" if inc.root_caught else f" (waiting on {incidents.waits_of(r)}: not caught)"
        out.append(f"   root:      {r.kind}{uncaught}")
        out.append(f"   next:      {r.advice}")
        for p in inc.peers:
            out.append(f"   also stuck: {_who(p)} in {p.call or p.phase} at {p.frame or '?'}")
        for w in inc.waiting:
            what = incidents.waits_of(w)
            out.append(f"   waiting:   {_who(w)} in {w.call or w.phase} at {w.frame or '?'} ({what})")
    return out


def run(args: argparse.Namespace) -> int:
    try:
        records, end, source = _read(args)
    except (OSError, JaegerError) as err:
        return fail(PROG, str(err))
    if args.json:
        found = incidents.group(records)
        old = config.flag(sc.ENV_DEPRECATED_NAMES, True, os.environ)  # "role" beside "process_role", for a release
        doc = {
            "run_end": None if end is None else end.as_dict(old),
            "incidents": [inc.as_dict(old) for inc in found],
            "stalls": [r.as_dict(old) for r in records],
        }
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        root = None if args.jaeger else Path(args.dir or os.environ.get(sc.ENV_DIR) or DEFAULT_DIR)
        sys.stdout.write(render(records, source, end, root))
    return 0
