"""``verl-otel``: ``demo`` (the CPU demo of a real verl run with telemetry on), ``top`` (a live view of a
running job), ``slow-steps`` (the slowest steps and the phase that made them slow) and ``val-generations``
(validation samples), both from Jaeger or the local trace file, ``timeline`` (one step as a picture),
``compare`` (one run against another), ``goodput`` (where the GPU hours went), ``doctor`` (a stuck run's stall
evidence, explained), ``capture`` (a stalled process' sampling profile), ``stack write`` (the Docker stack),
``push`` (spans a run could not deliver in time) and ``gather`` (every Ray node's files on this machine)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# subcommand -> module exposing add_parser(subparsers) and run(args) -> int
_COMMANDS = {
    "demo": "verl_otel.demo.cli",
    "slow-steps": "verl_otel.cli.slow_steps",
    "compare": "verl_otel.cli.compare",
    "timeline": "verl_otel.cli.timeline",
    "goodput": "verl_otel.cli.goodput",
    "top": "verl_otel.cli.top",
    "val-generations": "verl_otel.cli.val_generations",
    "stack": "verl_otel.cli.stack",
    "doctor": "verl_otel.cli.doctor",
    "capture": "verl_otel.cli.capture",
    "push": "verl_otel.cli.push",
    "gather": "verl_otel.cli.gather",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verl-otel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in _COMMANDS.values():
        mod = importlib.import_module(module)
        p = mod.add_parser(sub)
        p.set_defaults(_run=mod.run)
    return parser


#: the exit status of a process killed by SIGPIPE (128 + 13), as `cat big | head` leaves it
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    from verl_otel._log import console

    args = build_parser().parse_args(argv)
    console()  # our warnings on stderr, as in a training process
    try:
        rc = int(args._run(args) or 0)
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (`verl-otel slow-steps | head`): not an error worth a traceback; stdout
        # goes to /dev/null so the interpreter's own flush at exit does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return rc


if __name__ == "__main__":
    sys.exit(main())
