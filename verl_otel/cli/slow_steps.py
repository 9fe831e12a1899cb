"""``verl-otel slow-steps``: the N slowest steps, each with the phase that made it slow, from Jaeger
(``--jaeger URL``) or the embedded default's trace file (``--file``)."""

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
from verl_otel.analysis.jaeger import JaegerClient, JaegerError
from verl_otel.analysis.model import build_steps
from verl_otel.analysis.otlp_json import read_file

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text or "")
    if not m:
        raise argparse.ArgumentTypeError(f"--since {text!r}: use e.g. 30m, 2h, 1d")
    return float(m[1]) * _UNITS[m[2]]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("slow-steps", help="the slowest steps and the phase that made each slow")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--jaeger", metavar="URL", help="Jaeger query base URL, e.g. http://localhost:16686")
    src.add_argument("--file", metavar="TRACES_JSONL", help="the embedded default's trace file "
                     "(default: $VERL_OTEL_DIR/traces.jsonl)")
    p.add_argument("--service", default=os.environ.get("OTEL_SERVICE_NAME") or sc.SERVICE_NAME_DEFAULT)
    p.add_argument("--since", type=parse_since, default=parse_since("24h"), help="window, e.g. 30m, 2h, 1d")
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--jaeger-ui", default=None, help="base URL for trace links (default: --jaeger, or "
                   "http://localhost:16686)")
    return p


def run(args: argparse.Namespace) -> int:
    now_ns = time.time_ns()
    start_ns = now_ns - int(args.since * 1e9)
    ui = args.jaeger_ui or args.jaeger or "http://localhost:16686"
    if args.jaeger:
        try:
            spans = JaegerClient(args.jaeger).find_steps(args.service, start_ns, now_ns)
        except JaegerError as err:
            print(f"verl-otel slow-steps: {err}", file=sys.stderr)
            return 2
        source = args.jaeger
    else:
        path = Path(args.file or Path(os.environ.get(sc.ENV_DIR) or "./verl-otel-data") / sc.TRACES_FILE)
        try:
            spans, bad = read_file(path)
        except OSError as err:
            print(f"verl-otel slow-steps: cannot read {path}: {err.strerror or err}", file=sys.stderr)
            return 2
        if bad:
            print(f"verl-otel slow-steps: skipped {bad} malformed line{'s' * (bad != 1)} in {path}", file=sys.stderr)
        spans = [s for s in spans if s.service in ("", args.service)]
        source = str(path)
    steps = [s for s in build_steps(spans) if s.start_ns >= start_ns]
    verdicts = slow_steps.rank(steps, args.top)
    if not verdicts:
        print(f"verl-otel slow-steps: no step traces found for service {args.service!r} in the last "
              f"{args.since:g}s at {source}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(slow_steps.to_json(verdicts, ui), indent=2))
    else:
        print(slow_steps.to_text(verdicts, ui))
    return 0
