"""docs/reference/cli.md from the ``verl-otel`` parser itself: every command and subcommand, its usage, its
description and a row per argument (flags, help, default)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

from verl_otel.cli.main import build_parser

_WIDE = "10000"  # argparse wraps usage at the terminal's width: one line each, whatever runs the generator


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:  # argparse's one way to walk its subparsers
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _help(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return parser._get_formatter()._expand_help(action)


def _metavar(action: argparse.Action, default: str) -> str:
    if action.metavar:
        return str(action.metavar)
    return "{" + ",".join(map(str, action.choices)) + "}" if action.choices else default


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{_metavar(action, action.dest)}`"
    meta = f" {_metavar(action, action.dest.upper())}" if action.nargs != 0 else ""
    return ", ".join(f"`{flag}{meta}`" for flag in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, [], ""):
        return ""
    return f"`{action.default}`"


def _section(path: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    out = [f"{'#' * level} `{path}`", ""]
    if parser.description:
        out += [_cell(parser.description), ""]
    out += ["```text", parser.format_usage().strip(), "```", ""]
    rows = [
        a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction) and a.help != argparse.SUPPRESS
    ]
    if rows:
        out += ["| argument | what | default |", "|---|---|---|"]
        out += [f"| {_flags(a)} | {_cell(_help(a, parser))} | {_default(a)} |" for a in rows]
        out.append("")
    for name, sub in _subcommands(parser):
        out += _section(f"{path} {name}", sub, level + 1)
    return out


def markdown() -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _WIDE
    try:
        parser = build_parser()
        out = [
            "# Command line",
            "",
            "Generated from the `verl-otel` parser (`verl_otel/cli/`) by `make docs`: do not edit.",
            "",
            "Argument errors are reported at once on stderr with exit status 2; a closed pipe (`verl-otel slow-steps "
            "| head`) ends a command quietly (status 141, as for any Unix tool killed by SIGPIPE).",
            "",
        ]
        for name, sub in _subcommands(parser):
            out += _section(f"verl-otel {name}", sub, 2)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(out).rstrip() + "\n"
