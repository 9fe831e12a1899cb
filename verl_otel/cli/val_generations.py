"""``verl-otel val-generations``: the validation generations of a run (the samples verl picks for
``trainer.log_val_generations``): step, score, data source, and the prompt and response when they were
captured (VERL_OTEL_CAPTURE_TEXT=1); newest first, from the trace file (``--file``) or Jaeger (``--jaeger``)."""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis.jaeger import rfc3339
from verl_otel.analysis.val_generation_reader import VALIDATE_SPANS, Generation, generations, needed
from verl_otel.cli.argtypes import non_negative_int
from verl_otel.cli.spans import SourceError, add_source_args, fail, read_spans

PROG = "verl-otel val-generations"
INDENT = "    "


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "val-generations", help="validation generations of a run, newest first", description=__doc__
    )
    add_source_args(p, since="7d")
    p.add_argument(
        "--step", type=non_negative_int, metavar="N", help="only the validation of global step N (0: before training)"
    )
    p.add_argument("--json", action="store_true", help="print JSON (a list, newest first)")
    return p


def run(args: argparse.Namespace) -> int:
    try:
        got = read_spans(args, VALIDATE_SPANS, PROG, keep=needed)
    except SourceError as err:
        return fail(PROG, str(err))
    found = [g for g in generations(got.spans) if g.service in ("", args.service)]
    if args.step is not None:
        found = [g for g in found if g.step == args.step]
    if args.json:
        print(json.dumps([g.to_json() for g in found], indent=2))
        return 0
    if not found:
        which = f" of step {args.step}" if args.step is not None else ""
        return fail(
            PROG,
            f"no validation generations{which} for service {args.service!r} {got.window} in "
            f"{got.source}{got.hint} (verl logs them with trainer.log_val_generations > 0)",
        )
    print(
        f"{len(found)} validation generation{'s' * (len(found) != 1)} of service {args.service!r} "
        f"{got.window} ({got.source}), newest first"
    )
    print("\n".join(map(to_text, found)))
    return 0


def to_text(g: Generation) -> str:
    where = (
        f"step {g.step}"
        if g.step is not None
        else f"param version {g.param_version}"
        if g.param_version is not None
        else "step ?"
    )
    score = "-" if g.score is None else f"{g.score:g}"
    source = g.data_source or (" or ".join(g.data_sources) if g.data_sources else "-")
    lines = [f"{where}  score {score}  data source {source}  {rfc3339(g.time_ns)[:19]}Z"]
    for label, text in (("prompt", g.prompt), ("response", g.response)):
        if text is not None:
            body = textwrap.indent(text.rstrip("\n"), INDENT + "  ")
            lines.append(f"{INDENT}{label}:{' (truncated)' if g.truncated else ''}\n{body}")
    if g.prompt is None and g.response is None:
        lines.append(f"{INDENT}(no text: the run did not set {sc.ENV_CAPTURE_TEXT}=1)")
    return "\n".join(lines)
