"""``verl-otel top``: a live terminal view of a running job, read from the /metrics pages listed in the
run's ``prometheus_targets.json`` (no Prometheus needed) or from a Prometheus server (``--prometheus``).
``--once`` prints one frame and exits (for scripts)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from verl_otel import semconv as sc
from verl_otel.cli.argtypes import positive_float, positive_int

PROG = "verl-otel top"
DEFAULT_DIR = "./verl-otel-data"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("top", help="live terminal view of a running job", description=__doc__)
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--targets",
        metavar="FILE_OR_DIR",
        help=f"the run's {sc.PROM_TARGETS_FILE} or its directory (default: ${sc.ENV_DIR}, defaulting to {DEFAULT_DIR})",
    )
    src.add_argument("--prometheus", metavar="URL", help="read from Prometheus instead, e.g. http://localhost:9090")
    p.add_argument(
        "--run",
        metavar="PROJECT/EXPERIMENT",
        help="the run to show when the source holds several (default: the one that stepped last)",
    )
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    p.add_argument(
        "--interval", type=positive_float, default=2.0, metavar="SECONDS", help="refresh period (default: %(default)s)"
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        default=5,
        metavar="N",
        help="steps in the phase-time table (default: %(default)s)",
    )
    p.add_argument(
        "--gpu-memory-gb",
        type=positive_float,
        default=None,
        metavar="GB",
        help="device memory for the memory signal (default: the alert rules' 80)",
    )
    p.add_argument(
        "--width", type=positive_int, default=None, help="columns of --once output (default: the terminal's)"
    )
    return p


def _source(args: argparse.Namespace) -> Any:
    from verl_otel.live.sources import PrometheusQuery, TargetsFile

    if args.prometheus:
        experiment = args.run.split("/", 1)[1] if args.run and "/" in args.run else args.run
        return PrometheusQuery(args.prometheus, experiment)
    return TargetsFile(Path(args.targets or os.environ.get(sc.ENV_DIR) or DEFAULT_DIR))


def _console_class() -> Any:
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError  # the CLI's one way out of a closed pipe (rich would exit 1 on its own)

    return PipeConsole


def run(args: argparse.Namespace) -> int:
    from rich.live import Live
    from rich.text import Text

    from verl_otel.live.health_table import signals
    from verl_otel.live.replicas import ReplicaWatch
    from verl_otel.live.run_view import HISTORY_KEYS, History, attach_stall_frames, build_view
    from verl_otel.live.sources import PrometheusQuery, SourceError, TargetsFile
    from verl_otel.live.view import frame

    _Console = _console_class()  # noqa: N806 (a class)
    source = _source(args)
    run_name = args.run if args.run and "/" in args.run else None
    history = History()
    replica_watch = ReplicaWatch()  # a replica is STUCK only over frames: --once shows none
    # Prometheus remembers the steps logged before this view started: read them once, for the run shown
    backfill = [isinstance(source, PrometheusQuery)]

    def render() -> Any:
        try:
            view = build_view(source.read(), run_name)
            if isinstance(source, TargetsFile):
                attach_stall_frames(view, source.path.parent / sc.STALLS_DIR)
            if backfill[0]:
                for metrics in source.history(view.run or None, HISTORY_KEYS):
                    history.add_metrics(metrics)
                backfill[0] = False
        except SourceError as err:
            if args.once:
                raise
            # live: a Prometheus restart or a rewritten targets file should not end the view
            return Text(f"{PROG}: {err} (trying again every {args.interval:g}s; Ctrl-C to leave)", "yellow")
        history.add(view)
        view.replicas = replica_watch.update(view.replicas, time.time())
        health = signals(view, history, gpu_memory_gb=args.gpu_memory_gb)
        return frame(view, history, health, steps_shown=args.steps)

    try:
        if args.once:
            _Console(width=args.width, soft_wrap=False).print(render())
            return 0
        console = _Console()
        with Live(render(), console=console, refresh_per_second=4, screen=False, auto_refresh=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(render(), refresh=True)
    except SourceError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0  # Ctrl-C is how one leaves a live view, not an error
