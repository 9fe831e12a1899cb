"""``verl-otel capture FILE``: a capture's hottest frames (a speedscope file under ``$VERL_OTEL_DIR/captures/``,
recorded while a call was stalled), for a user with no browser at hand: where the samples' innermost frames were,
and the frames most of them sat under."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from verl_otel.analysis import captures
from verl_otel.cli.argtypes import positive_int
from verl_otel.cli.spans import fail

PROG = "verl-otel capture"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("capture", help="a capture's hottest frames", description=__doc__)
    p.add_argument("file", metavar="FILE", help="a capture (.speedscope.json)")
    p.add_argument("--top", type=positive_int, default=10, metavar="N", help="frames shown (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON (samples, threads, innermost, inclusive)")
    return p


def run(args: argparse.Namespace) -> int:
    try:
        got = captures.read(Path(args.file), top=args.top)
    except captures.CaptureError as err:
        return fail(PROG, str(err))
    print(json.dumps(got.as_dict(), indent=2) if args.json else captures.to_text(got))
    return 0
