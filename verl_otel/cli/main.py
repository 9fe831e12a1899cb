"""``verl-otel``: ``demo`` (the CPU demo of a real verl run with telemetry on) and ``slow-steps``
(the slowest steps and the phase that made them slow, from Jaeger or the local trace file)."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module exposing add_parser(subparsers) and run(args) -> int
_COMMANDS = {
    "demo": "verl_otel.demo.cli",
    "slow-steps": "verl_otel.cli.slow_steps",
    "top": "verl_otel.cli.top",
    "val-generations": "verl_otel.cli.val_generations",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verl-otel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in _COMMANDS.values():
        mod = importlib.import_module(module)
        p = mod.add_parser(sub)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
