"""``verl-otel slow-steps``: the N slowest steps, each with the phase that made it slow, from Jaeger
(``--jaeger URL``) or the embedded default's trace file (``--file``, default $VERL_OTEL_DIR/traces.jsonl)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis import slow_steps
from verl_otel.analysis.jaeger import (
    DEFAULT_LIMIT,
    DEFAULT_UI,
    JaegerClient,
    JaegerError,
)
from verl_otel.analysis.model import build_steps
from verl_otel.analysis.otlp_json import read_file

PROG = "verl-otel slow-steps"
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


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return n


def default_file() -> Path:
    return Path(os.environ.get(sc.ENV_DIR) or DEFAULT_DIR) / sc.TRACES_FILE


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("slow-steps", help="the slowest steps and the phase that made each slow",
                              description=__doc__)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--jaeger", metavar="URL", help="Jaeger query/UI base URL, e.g. http://localhost:16686")
    src.add_argument("--file", metavar="TRACES_JSONL",
                     help=f"OTLP/JSON trace file (default: ${sc.ENV_DIR}/{sc.TRACES_FILE}, {sc.ENV_DIR} "
                          f"defaulting to {DEFAULT_DIR})")
    p.add_argument("--service", default=sc.SERVICE_NAME_DEFAULT,
                   help="service.name of the trainer (default: %(default)s)")
    p.add_argument("--since", type=parse_since, default=parse_since("24h"), metavar="WINDOW",
                   help="how far back, e.g. 30m, 2h, 1d (default: 24h)")
    p.add_argument("--top", type=_positive, default=5, metavar="N", help="how many steps (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON (a list, slowest step first)")
    p.add_argument("--jaeger-ui", metavar="URL", default=None,
                   help=f"base URL of trace links (default: --jaeger, else {DEFAULT_UI})")
    return p


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    now_ns = time.time_ns()
    start_ns = now_ns - int(args.since * 1e9)
    window = f"in the last {human(args.since)}"
    hint = ""
    if args.jaeger:
        client = JaegerClient(args.jaeger)
        try:
            spans = client.find_steps(args.service, start_ns, now_ns, DEFAULT_LIMIT)
        except JaegerError as err:
            return _fail(str(err))
        source = f"Jaeger at {client.base}"
        ui = args.jaeger_ui or client.base
    else:
        path = Path(args.file) if args.file else default_file()
        try:
            got = read_file(path, min_start_ns=start_ns)
        except OSError as err:
            return _fail(f"cannot read {path}: {err.strerror or err}")
        if got.malformed:
            print(f"{PROG}: skipped {got.malformed} malformed line{'s' * (got.malformed != 1)} in {path}",
                  file=sys.stderr)
        spans = got.spans
        source = str(path)
        ui = args.jaeger_ui or DEFAULT_UI
        if got.older:
            hint = f" ({got.older} older spans in the file: widen --since)"
    steps = [s for s in build_steps(spans) if s.start_ns >= start_ns]
    mine = [s for s in steps if s.service in ("", args.service)]
    if not slow_steps.training_steps(mine):
        others = sorted({s.service for s in steps} - {"", args.service})
        if others:
            hint = f" (step traces exist for service {', '.join(map(repr, others))}: use --service)"
        return _fail(f"no step traces found for service {args.service!r} {window} in {source}{hint}")
    ranking = slow_steps.rank(mine, args.top)
    if args.json:
        print(json.dumps(slow_steps.to_json(ranking, ui), indent=2))
    else:
        print(_header(ranking, args.service, window, source))
        print(slow_steps.to_text(ranking, ui))
    return 0


def _header(ranking: slow_steps.Ranking, service: str, window: str, source: str) -> str:
    n = ranking.steps_compared
    return (f"{len(ranking.verdicts)} slowest of {n} step{'s' * (n != 1)} of service {service!r} {window} "
            f"({source}); each phase is compared with its median over those steps")
