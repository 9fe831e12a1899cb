"""``verl-otel slow-steps``: the N slowest steps, each with the phase that made it slow, from Jaeger
(``--jaeger URL``) or the embedded default's trace file (``--file``, default $VERL_OTEL_DIR/traces.jsonl)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis import slow_steps
from verl_otel.analysis.step_traces import build_steps
from verl_otel.cli.argtypes import positive_int
from verl_otel.cli.spans import SourceError, add_source_args, default_file, fail, human, parse_since, read_spans

PROG = "verl-otel slow-steps"
__all__ = ["add_parser", "default_file", "human", "parse_since", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "slow-steps", help="the slowest steps and the phase that made each slow", description=__doc__
    )
    add_source_args(p)
    p.add_argument("--top", type=positive_int, default=5, metavar="N", help="how many steps (default: %(default)s)")
    p.add_argument(
        "--per-token",
        action="store_true",
        help="rank by the largest per-token slowdown of a phase (its seconds per token against its median)",
    )
    p.add_argument(
        "--tools",
        action="store_true",
        help="per step, each tool's calls, failures, p50 and slowest call (agent loops; the spanned samples' calls)",
    )
    p.add_argument("--json", action="store_true", help="print JSON (a list, slowest step first)")
    p.add_argument(
        "--jaeger-ui",
        metavar="URL",
        default=None,
        help="base URL of trace links (default: --jaeger; reading a file, no links unless given)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    try:
        got = read_spans(args, (sc.SPAN_STEP,), PROG, steps_samples=slow_steps.SAMPLES_SHOWN)
    except SourceError as err:
        return fail(PROG, str(err))
    # a link is only worth printing where a Jaeger holds the trace: the one read, or the one named
    ui = args.jaeger_ui or got.jaeger
    steps = [s for s in (build_steps(got.spans) if got.steps is None else got.steps) if s.start_ns >= got.start_ns]
    mine = [s for s in steps if s.service in ("", args.service)]
    hint = got.hint
    if not slow_steps.training_steps(mine):
        others = sorted({s.service for s in steps} - {"", args.service})
        if others:
            hint = f" (step traces exist for service {', '.join(map(repr, others))}: use --service)"
        return fail(PROG, f"no step traces found for service {args.service!r} {got.window} in {got.source}{hint}")
    ranking = slow_steps.rank(mine, args.top, per_token=args.per_token)
    if got.whole is not None:  # ranked from Jaeger's step summaries: the steps shown are explained from their traces
        try:
            mine = got.completed(mine, [v.step for v in ranking.verdicts])
        except SourceError as err:
            return fail(PROG, str(err))
        ranking = slow_steps.rank(mine, args.top, per_token=args.per_token)
    if args.json:
        print(json.dumps(slow_steps.to_json(ranking, ui), indent=2))
    else:
        print(_header(ranking, args.service, got.window, got.source))
        print(slow_steps.to_text(ranking, ui, tools=args.tools))
    return 0


def _header(ranking: slow_steps.Ranking, service: str, window: str, source: str) -> str:
    n = ranking.steps_compared
    how = " per token" if ranking.per_token else ""
    return (
        f"{len(ranking.verdicts)} slowest{how} of {n} step{'s' * (n != 1)} of service {service!r} {window} "
        f"({source}); each phase is compared with its median over those steps"
    )
