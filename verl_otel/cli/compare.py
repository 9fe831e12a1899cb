"""``verl-otel compare BASELINE OTHER``: one run against another, from two trace files (or directories holding the
embedded default's traces.jsonl), or with ``--jaeger URL`` two runs in Jaeger named ``PROJECT/EXPERIMENT`` (the step
spans' verl.project and verl.experiment, within ``--since``). Per phase: the median time over the training steps it
ran in and the median time per 1k tokens in each run, and the ratio OTHER/BASELINE of the medians with its 95%
bootstrap interval (each run's per-step times resampled with replacement 2,000 times, seeded: the same answer every
time). A phase "changed beyond noise" when that interval excludes 1, the ratio moved by at least 10% and the median
by at least 0.05 s (identical runs on one host move short phases that much with the host's load); those come
first. Then what differed between the runs: the step spans' attributes that hold one value within each run
(verl.version, verl.trainer, verl.trainer_mode, verl.rollout_n, verl.batch_size, ...; not what a step measured,
such as its goodput), samples and tokens. Step 0 (the validation before training) and validation-only steps are
listed apart; a phase that ran in one run only is listed apart.

--json prints one object: ``baseline`` and ``other`` (``source``, ``steps`` compared, ``steps_apart``,
``samples``, ``tokens``, ``config``: the constant step span attributes), ``interval`` (``confidence``,
``resamples``, ``seed``, ``min_change``, ``min_move_s``), ``changed`` (phase names, largest move first), ``phases``
(each: ``phase``, ``baseline_s``, ``other_s`` medians, ``baseline_steps``, ``other_steps`` it ran in,
``baseline_s_per_1k_tokens``, ``other_s_per_1k_tokens``, ``ratio``, ``ci_low``, ``ci_high``,
``per_1k_tokens_ratio``, ``changed``), ``only_baseline``, ``only_other`` (phase names), ``differences``
(each: ``attribute``, ``baseline``, ``other``; null where the run's steps do not carry it)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from verl_otel import semconv as sc
from verl_otel.analysis import compare, jaeger_pages
from verl_otel.analysis.jaeger import JaegerClient, JaegerError
from verl_otel.analysis.step_stream import read_steps
from verl_otel.analysis.step_traces import StepTrace
from verl_otel.cli.spans import SourceError, fail, human, parse_since

PROG = "verl-otel compare"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "compare",
        help="one run against another: phases that changed beyond noise, and what differed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "baseline",
        metavar="BASELINE",
        help=f"trace file, or a directory holding {sc.TRACES_FILE}; with --jaeger: PROJECT/EXPERIMENT",
    )
    p.add_argument("other", metavar="OTHER", help="the run to compare with the baseline (the same)")
    p.add_argument("--jaeger", metavar="URL", help="read both runs from this Jaeger (query/UI base URL)")
    p.add_argument(
        "--since",
        type=parse_since,
        default=parse_since("7d"),
        metavar="WINDOW",
        help="with --jaeger: how far back, e.g. 2h, 7d (default: 7d)",
    )
    p.add_argument(
        "--service", default=sc.SERVICE_NAME_DEFAULT, help="service.name of the trainer (default: %(default)s)"
    )
    p.add_argument("--json", action="store_true", help="print JSON (the keys are described above)")
    return p


def _steps(arg: str, service: str) -> tuple[str, list[StepTrace]]:
    path = Path(arg)
    if path.is_dir():
        path = path / sc.TRACES_FILE
    try:
        steps, got = read_steps(path, 0, samples_kept=0)
    except OSError as err:
        raise SourceError(f"cannot read {path}: {err.strerror or err}") from None
    if got.malformed:
        print(f"{PROG}: skipped {got.malformed} malformed line{'s' * (got.malformed != 1)} in {path}", file=sys.stderr)
    mine = [s for s in steps if s.service in ("", service)]
    if not compare.compared_steps(mine)[0]:
        raise SourceError(f"no training step traces for service {service!r} in {path}")
    return str(path), mine


def _jaeger_runs(args: argparse.Namespace) -> tuple[tuple[str, list[StepTrace]], tuple[str, list[StepTrace]]]:
    client, now_ns = JaegerClient(args.jaeger), time.time_ns()
    try:
        start_ns = now_ns - int(args.since * 1e9)
        # the steps' summaries (small traces); a run written without them: every step trace whole
        steps = jaeger_pages.summaries(client, args.service, start_ns, now_ns) or jaeger_pages.steps(
            client, args.service, start_ns, now_ns, (sc.SPAN_STEP,), 0
        )
    except JaegerError as err:
        raise SourceError(str(err)) from None
    out = []
    for name in (args.baseline, args.other):
        project, sep, experiment = name.partition("/")
        if not sep:
            raise SourceError(f"{name!r}: with --jaeger, name a run PROJECT/EXPERIMENT")
        mine = [
            s
            for s in steps
            if str(s.attributes.get(sc.ATTR_PROJECT)) == project
            and str(s.attributes.get(sc.ATTR_EXPERIMENT)) == experiment
        ]
        if not compare.compared_steps(mine)[0]:
            raise SourceError(
                f"no training step traces of run {name!r} (service {args.service!r}) in the last "
                f"{human(args.since)} in Jaeger at {client.base}"
            )
        out.append((f"{name} in Jaeger at {client.base}", mine))
    return out[0], out[1]


def run(args: argparse.Namespace) -> int:
    try:
        if args.jaeger:
            base, other = _jaeger_runs(args)
        else:
            base = _steps(args.baseline, args.service)
            other = _steps(args.other, args.service)
    except SourceError as err:
        return fail(PROG, str(err))
    result = compare.compare(*base, *other)
    print(json.dumps(compare.to_json(result), indent=2) if args.json else compare.to_text(result))
    return 0
