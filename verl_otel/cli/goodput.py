"""``verl-otel goodput``: where the GPU hours went over a run (or a window): GPU-hours per bucket (generating, the
long tail, training by phase, weight sync, validation, checkpoint, idle, ...), the worst steps and what would
give back the most time, from the step spans' goodput attributes in Jaeger (``--jaeger URL``) or the trace file
(``--file``), or the run totals from Prometheus (``--prometheus URL``: ``verl_gpu_seconds_total``, no steps)."""

from __future__ import annotations

import argparse
import json
import urllib.parse
import urllib.request
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis import goodput
from verl_otel.analysis.step_traces import build_steps
from verl_otel.cli.argtypes import positive_int
from verl_otel.cli.spans import SourceError, add_source_args, fail, read_spans

PROG = "verl-otel goodput"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("goodput", help="where the GPU hours went, per bucket and step", description=__doc__)
    add_source_args(p)
    p.add_argument("--prometheus", metavar="URL", help="Prometheus base URL: the run totals of verl_gpu_seconds_total")
    p.add_argument(
        "--worst", type=positive_int, default=3, metavar="N", help="worst steps shown (default: %(default)s)"
    )
    p.add_argument("--json", action="store_true", help="print JSON: steps (step, gpu_seconds, buckets) and totals")
    return p


def _from_prometheus(url: str, since_s: float) -> dict[str, float]:
    expr = f"sum by ({sc.LABEL_BUCKET}) (max_over_time({sc.GPU_SECONDS.name}[{max(1, int(since_s))}s]))"
    query = f"{url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(query, timeout=10.0) as resp:
            body = json.loads(resp.read())
    except (OSError, ValueError) as err:
        raise SourceError(f"cannot query {url}: {err}") from err
    out: dict[str, float] = {}
    for row in body.get("data", {}).get("result", []):
        bucket = row.get("metric", {}).get(sc.LABEL_BUCKET)
        if bucket in sc.BUCKETS:
            out[bucket] = float(row["value"][1])
    return out


def run(args: argparse.Namespace) -> int:
    if args.prometheus and (args.jaeger or args.file):
        return fail(PROG, "--prometheus, --jaeger and --file are alternatives: give one")
    try:
        if args.prometheus:
            totals = _from_prometheus(args.prometheus, args.since)
            if not any(totals.values()):
                return fail(PROG, f"no {sc.GPU_SECONDS.name} in {args.prometheus}")
            summary = goodput.summarize([], totals)
        else:
            got = read_spans(args, (sc.SPAN_STEP,), PROG, steps_samples=1)
            steps = [
                s for s in (build_steps(got.spans) if got.steps is None else got.steps) if s.start_ns >= got.start_ns
            ]
            mine = [s for s in steps if s.service in ("", args.service)]
            splits = goodput.of_steps(mine)
            if not splits:
                return fail(
                    PROG, f"no step with goodput attributes for service {args.service!r} {got.window} in {got.source}"
                )
            summary = goodput.summarize(splits)
    except SourceError as err:
        return fail(PROG, str(err))
    if args.json:
        print(json.dumps(goodput.to_json(summary, args.worst), indent=2))
    else:
        print(goodput.to_text(summary, args.worst))
    return 0
