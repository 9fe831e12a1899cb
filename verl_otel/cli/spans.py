"""What the trace-reading commands (``slow-steps``, ``val-generations``) share: the source options
(``--jaeger URL`` or ``--file``, the service, the ``--since`` window) and reading the spans."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from verl_otel import semconv as sc
from verl_otel.analysis import clock, jaeger_pages
from verl_otel.analysis.jaeger import JaegerClient, JaegerError
from verl_otel.analysis.otlp_json import FileRead, read_file
from verl_otel.analysis.step_stream import read_steps
from verl_otel.analysis.step_traces import Span, StepTrace

DEFAULT_DIR = "./verl-otel-data"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> float:
    """``30m``, ``2h``, ``1d``, ``90s`` (or a bare number of seconds) -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text or "")
    if not m or float(m[1]) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a window: use e.g. 30m, 2h, 1d")
    return float(m[1]) * _UNITS[m[2] or "s"]


def human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= (2 * size if unit == "d" else size) and (seconds / size).is_integer():  # 24h, not 1d
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def default_file() -> Path:
    return Path(os.environ.get(sc.ENV_DIR) or DEFAULT_DIR) / sc.TRACES_FILE


def add_source_args(p: argparse.ArgumentParser, since: str = "24h") -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--jaeger", metavar="URL", help="Jaeger query/UI base URL, e.g. http://localhost:16686")
    src.add_argument(
        "--file",
        metavar="TRACES_JSONL",
        help=f"OTLP/JSON trace file (default: ${sc.ENV_DIR}/{sc.TRACES_FILE}, {sc.ENV_DIR} "
        f"defaulting to {DEFAULT_DIR})",
    )
    p.add_argument(
        "--service", default=sc.SERVICE_NAME_DEFAULT, help="service.name of the trainer (default: %(default)s)"
    )
    p.add_argument(
        "--since",
        type=parse_since,
        default=parse_since(since),
        metavar="WINDOW",
        help=f"how far back, e.g. 30m, 2h, 1d (default: {since})",
    )


@dataclass
class Read:
    spans: list[Span] = field(default_factory=list)
    source: str = ""
    jaeger: str | None = None  # the Jaeger base URL read from, if any
    hint: str = ""
    start_ns: int = 0
    window: str = ""
    steps: list[StepTrace] | None = None  # read from a file with ``steps_samples``: the steps, not the spans
    #: read from Jaeger's step summaries: the steps given, each read whole from its trace (by trace id)
    whole: Callable[[list[StepTrace]], dict[str, StepTrace]] | None = None

    def completed(self, steps: list[StepTrace], shown: list[StepTrace]) -> list[StepTrace]:
        """``steps`` with those of ``shown`` read from a summary replaced by their whole trace (its samples,
        worker calls, weight syncs: what explains a step), where Jaeger still has it."""
        light = [s for s in shown if s.summarized]
        if self.whole is None or not light:
            return steps
        try:
            got = self.whole(light)
        except JaegerError as err:
            raise SourceError(str(err)) from None
        return [got.get(s.trace_id, s) if s.summarized else s for s in steps]


class SourceError(Exception):
    """One line for the user: the source cannot be read."""


def read_spans(
    args: argparse.Namespace,
    operations: tuple[str, ...],
    prog: str,
    keep: Callable[[Span], Span | None] | None = None,
    steps_samples: int | None = None,
) -> Read:
    """The spans of ``args``' source in its window: from Jaeger every trace holding one of ``operations``,
    from the file every span; of each, what ``keep`` holds (default all), or with ``steps_samples`` the step
    traces themselves (``Read.steps``, each with that many slowest samples). Both are read a page (Jaeger) or
    a line (the file) at a time."""
    now_ns = time.time_ns()
    out = Read(start_ns=now_ns - int(args.since * 1e9), window=f"in the last {human(args.since)}")
    if args.jaeger:
        client, pages, seen = JaegerClient(args.jaeger), jaeger_pages.Pages(), set[str]()
        try:
            if steps_samples is not None:
                # the steps' summaries first (small traces); a run written without them: every step trace whole
                out.steps = jaeger_pages.summaries(client, args.service, out.start_ns, now_ns, pages)
                if out.steps:
                    out.whole = lambda shown: jaeger_pages.whole(client, shown, steps_samples)
                else:
                    out.steps = jaeger_pages.steps(
                        client, args.service, out.start_ns, now_ns, operations, steps_samples, pages
                    )
            for op in operations if steps_samples is None else ():
                for page in jaeger_pages.walk(client, args.service, out.start_ns, now_ns, op, seen=seen, stats=pages):
                    out.spans += page if keep is None else [k for k in map(keep, page) if k is not None]
        except JaegerError as err:
            raise SourceError(str(err)) from None
        if pages.crowded:
            print(
                f"{prog}: {pages.crowded} microsecond{'s' * (pages.crowded != 1)} of {client.base} each held more "
                f"traces than one answer takes: some of them may be missing",
                file=sys.stderr,
            )
        out.source, out.jaeger = f"Jaeger at {client.base}", client.base
        return out
    path = Path(args.file) if args.file else default_file()
    try:
        got: FileRead
        if steps_samples is not None:
            # a child on a host whose clock runs behind may start before the window its step starts in
            out.steps, got = read_steps(path, max(0, out.start_ns - int(clock.MARGIN_S * 1e9)), steps_samples)
        else:
            got = read_file(path, min_start_ns=out.start_ns, keep=keep)
    except OSError as err:
        raise SourceError(f"cannot read {path}: {err.strerror or err}") from None
    if got.malformed:
        print(f"{prog}: skipped {got.malformed} malformed line{'s' * (got.malformed != 1)} in {path}", file=sys.stderr)
    out.spans, out.source = got.spans, str(path)
    if got.older:
        out.hint = f" ({got.older} older spans in the file: widen --since)"
    return out


def fail(prog: str, message: str) -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return 2
