"""``verl-otel stack write DIR``: writes the Docker stack (docker-compose.yml, deploy/: Collector, Jaeger,
Prometheus with the alert rules, Grafana provisioning; grafana/: the dashboards) from the installed package,
so ``pip install verl-otel`` users get it without a clone. Then ``cd DIR && docker compose up -d``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from verl_otel.cli import stack_native
from verl_otel.cli.stack_files import write

PROG = "verl-otel stack"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "stack",
        help="the stack (Collector, Jaeger, Prometheus, Alertmanager, Grafana): write for Docker, up/down natively",
        description=__doc__,
    )
    sub = p.add_subparsers(dest="stack_command", required=True)
    w = sub.add_parser("write", help="write docker-compose.yml and its configs into DIR", description=__doc__)
    w.add_argument("dir", metavar="DIR", help="where to write (created if missing)")
    w.add_argument("--force", action="store_true", help="replace files of DIR that differ")
    stack_native.add_parsers(sub)
    return p


def run(args: argparse.Namespace) -> int:
    if args.stack_command == "up":
        return stack_native.run_up(args)
    if args.stack_command == "down":
        return stack_native.run_down(args)
    dest = Path(args.dir)
    try:
        files = write(dest, args.force)
    except FileExistsError as err:
        print(f"{PROG}: {dest} already has different {err} (--force replaces them)", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"{PROG}: cannot write {dest}: {err.strerror or err}", file=sys.stderr)
        return 2
    print(f"wrote {len(files)} files of the verl-otel stack to {dest}:")
    print("\n".join(f"  {f}" for f in files))
    print(
        f"next: cd {dest} && docker compose up -d   (then export OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317;"
        " deploy/README.md says more)"
    )
    return 0
