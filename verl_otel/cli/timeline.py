"""``verl-otel timeline``: one step as a picture: the driver's phases, a lane per training rank, rollout replica
and agent-loop worker, the slowest samples on their lanes, the stretches without a call shaded by bucket, and the
buckets' totals; one self-contained HTML page (``-o``, opens offline) and, with ``--png``, a screenshot of it by a
headless Chromium. From the trace file (``--file``, or ``--dir``: a run's data folder) or Jaeger (``--jaeger``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis import jaeger_pages
from verl_otel.analysis import timeline as tlm
from verl_otel.analysis.jaeger import JaegerClient, JaegerError
from verl_otel.analysis.otlp_json import FileRead, iter_file
from verl_otel.analysis.step_traces import Span, as_int
from verl_otel.cli import browser, timeline_page
from verl_otel.cli.argtypes import positive_int
from verl_otel.cli.spans import DEFAULT_DIR, default_file, fail, parse_since

PROG = "verl-otel timeline"
_STEP_LINE = f'"name":"{sc.SPAN_STEP}"'.encode()


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "timeline", help="one step as a picture: phases, lanes per process, idle stretches", description=__doc__
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--file",
        metavar="TRACES_JSONL",
        help=f"OTLP/JSON trace file (default: ${sc.ENV_DIR}/"
        f"{sc.TRACES_FILE}, {sc.ENV_DIR} defaulting to {DEFAULT_DIR})",
    )
    src.add_argument(
        "--dir",
        metavar="DIR",
        help=f"a run's data folder (its {sc.TRACES_FILE}; `verl-otel gather`'s output folder too)",
    )
    src.add_argument("--jaeger", metavar="URL", help="Jaeger query/UI base URL, e.g. http://localhost:16686")
    p.add_argument("--step", type=int, required=True, metavar="N", help="the global step to draw")
    p.add_argument(
        "--service", default=sc.SERVICE_NAME_DEFAULT, help="service.name of the trainer (default: %(default)s)"
    )
    p.add_argument(
        "--since",
        type=parse_since,
        default=parse_since("7d"),
        metavar="WINDOW",
        help="Jaeger: how far back to search for the step, e.g. 2h, 1d (default: 7d)",
    )
    p.add_argument("-o", "--out", metavar="HTML", default=None, help="the page (default: step-N.html)")
    p.add_argument("--png", metavar="PNG", default=None, help="also a screenshot of the page (headless Chromium)")
    p.add_argument(
        "--samples",
        type=positive_int,
        default=tlm.SAMPLES_DRAWN,
        metavar="N",
        help="the slowest samples drawn; the rest are counted on their lanes (default: %(default)s)",
    )
    p.add_argument("--browser", metavar="PATH", default=None, help="the Chromium for --png (default: on PATH)")
    return p


def run(args: argparse.Namespace) -> int:
    try:
        spans, source = _read(args)
    except (OSError, JaegerError) as err:
        return fail(PROG, str(err))
    tl = tlm.build(spans, args.step, args.service, args.samples)
    if tl is None:
        steps = sorted({n for s in spans if (n := as_int(s.attributes.get(sc.ATTR_GLOBAL_STEP))) is not None})
        have = f" (steps found: {_ranges(steps)})" if steps else ""
        return fail(PROG, f"no trace of step {args.step} for service {args.service!r} in {source}{have}")
    out = Path(args.out or f"step-{args.step}.html")
    out.write_text(timeline_page.render(tl, source), encoding="utf-8")
    drawn = f"{len(tl.lanes)} lanes, {tl.samples_drawn} of {tl.samples_total} samples drawn"
    how = "measured buckets" if tl.measured else "buckets derived from the spans (no GPU-time accounting in it)"
    print(f"wrote {out}: step {tl.step}, {tl.seconds:.2f} s, {drawn}, {how}")
    if args.png:
        height = 140 + max(timeline_page.svg_height(tl), 420)
        why = browser.screenshot(out, Path(args.png), timeline_page.WIDTH, height, args.browser)
        if why is not None:
            print(f"{PROG}: {why}", file=sys.stderr)
            return 1
        print(f"wrote {args.png}")
    return 0


def _read(args: argparse.Namespace) -> tuple[list[Span], str]:
    """The spans of the step's trace (and every step root seen, for the message when the step is not there)."""
    if args.jaeger:
        return _from_jaeger(args)
    path = Path(args.dir) / sc.TRACES_FILE if args.dir else Path(args.file) if args.file else default_file()
    got = FileRead()
    roots = [s for s in iter_file(path, 0, got, containing=_STEP_LINE) if s.name == sc.SPAN_STEP and not s.parent_id]
    root = tlm.find_root(roots, args.step, args.service)
    if root is None:
        return roots, str(path)
    # the second pass reads only the lines that name the trace (hex ids, as our file and the Collector write them)
    spans = [s for s in iter_file(path, 0, got, containing=root.trace_id.encode()) if s.trace_id == root.trace_id]
    if len(spans) <= 1:  # ids written another way (base64): every line
        spans = [s for s in iter_file(path, 0, got) if s.trace_id == root.trace_id]
    if got.malformed:
        print(f"{PROG}: skipped {got.malformed} malformed line(s) in {path}", file=sys.stderr)
    return spans, str(path)


def _from_jaeger(args: argparse.Namespace) -> tuple[list[Span], str]:
    client = JaegerClient(args.jaeger)
    now = time.time_ns()
    roots: list[Span] = []

    def keep(s: Span) -> Span | None:
        return s if s.name == sc.SPAN_STEP and not s.parent_id else None

    for page in jaeger_pages.walk(client, args.service, now - int(args.since * 1e9), now, sc.SPAN_STEP):
        roots += [k for k in map(keep, page) if k is not None]
        if tlm.find_root(roots, args.step, args.service) is not None:
            break  # newest first: the first found is the latest run's
    root = tlm.find_root(roots, args.step, args.service)
    if root is None:
        return roots, f"Jaeger at {client.base}"
    return client.get_trace(root.trace_id), f"Jaeger at {client.base}"


def _ranges(steps: list[int]) -> str:
    if len(steps) > 8:
        return f"{steps[0]}..{steps[-1]}, {len(steps)} of them"
    return ", ".join(map(str, steps))
