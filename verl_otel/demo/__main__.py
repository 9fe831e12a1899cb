"""``python -m verl_otel.demo [--steps N --out DIR --trainer v1|legacy ...]``: the same as ``verl-otel demo``."""

from __future__ import annotations

import argparse
import sys

from verl_otel.demo.cli import add_parser, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="verl-otel")  # usage reads "verl-otel demo ..."
    sub = parser.add_subparsers(dest="command")
    add_parser(sub)
    return run(parser.parse_args(["demo", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    sys.exit(main())
