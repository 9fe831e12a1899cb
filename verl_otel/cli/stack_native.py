"""``verl-otel stack up --native`` / ``stack down``: the stack without Docker (an HPC login node, a laptop): the
Collector and Jaeger from ``make stack-bin``, Prometheus and Alertmanager (``make prometheus``), each on the very
files of deploy/ with only addresses and paths overridden (verl_otel/native/). Grafana is not part of it."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from verl_otel.cli.stack_files import stack_root
from verl_otel.native import Binds, Ports, StackError, down, up
from verl_otel.native.configs import BINARIES

PROG = "verl-otel stack"


def default_state() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "verl-otel" / "stack"


def _port(text: str) -> tuple[str, int]:
    names = [f.name for f in fields(Ports)]
    name, _, value = text.partition("=")
    name = name.replace("-", "_")
    if name not in names or not value.isdigit() or not 0 < int(value) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=PORT, NAME one of {', '.join(names)}")
    return name, int(value)


def add_parsers(sub: Any) -> None:
    u = sub.add_parser("up", help="start the stack (--native: without Docker)", description=__doc__)
    u.add_argument("--native", action="store_true", help="run the binaries here (required: Docker is `stack write`)")
    u.add_argument("--state", type=Path, default=None, help=f"data, pids and logs (default {default_state()})")
    u.add_argument(
        "--otlp-bind",
        default=os.environ.get("VERL_OTEL_OTLP_BIND", "127.0.0.1"),
        help="address of the OTLP ingress, like compose's VERL_OTEL_OTLP_BIND (default 127.0.0.1)",
    )
    u.add_argument(
        "--ui-bind",
        default=os.environ.get("VERL_OTEL_UI_BIND", "127.0.0.1"),
        help="address of Jaeger, Prometheus, Alertmanager, like VERL_OTEL_UI_BIND (default 127.0.0.1)",
    )
    u.add_argument(
        "--port",
        type=_port,
        action="append",
        default=[],
        metavar="NAME=PORT",
        help="move a port, e.g. otlp_grpc=14317 (names: " + ", ".join(f.name for f in fields(Ports)) + ")",
    )
    for name in BINARIES:
        u.add_argument(f"--{name}", type=Path, default=None, metavar="PATH", help=f"the {name} binary")
    u.add_argument("--rules", type=Path, default=None, help="alert rules folder (default deploy/prometheus/rules)")
    u.add_argument("--timeout", type=float, default=120.0, help="seconds each part may take to become healthy")
    d = sub.add_parser("down", help="stop the stack `stack up --native` started", description=__doc__)
    d.add_argument("--state", type=Path, default=None, help=f"its state folder (default {default_state()})")


def run_up(args: argparse.Namespace) -> int:
    if not args.native:
        print(
            f"{PROG} up: Docker users run `{PROG} write DIR && cd DIR && docker compose up -d`; "
            "--native starts the stack here without Docker",
            file=sys.stderr,
        )
        return 2
    state = args.state or default_state()
    try:
        stack = up(
            stack_root(),
            state,
            Ports().with_(**dict(args.port)),
            Binds(args.otlp_bind, args.ui_bind),
            {n: getattr(args, n) for n in BINARIES},
            args.rules,
            args.timeout,
        )
    except (StackError, FileNotFoundError) as err:
        print(f"{PROG} up: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # what had started is stopped again, not left running unseen
        down(state)
        print(f"{PROG} up: interrupted; stopped what had started", file=sys.stderr)
        return 130
    print(f"the verl-otel stack runs (state, logs and pids in {stack.state}; `{PROG} down` stops it):")
    for what, url in stack.urls().items():
        print(f"  {what}: {url}")
    print(
        f"next: export OTEL_EXPORTER_OTLP_ENDPOINT={stack.otlp_endpoint} and train (no Grafana: "
        "import grafana/*.json into yours)"
    )
    return 0


def run_down(args: argparse.Namespace) -> int:
    state = args.state or default_state()
    try:
        stopped = down(state)
    except OSError as err:
        print(f"{PROG} down: {err}", file=sys.stderr)
        return 1
    print(f"stopped {', '.join(stopped)}" if stopped else f"no stack runs from {state}")
    return 0
