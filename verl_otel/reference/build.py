"""Write (or with --check, verify) docs/reference/*.md from the code.

Usage:
    python -m verl_otel.reference.build            # regenerate
    python -m verl_otel.reference.build --check    # exit 1 if a committed page differs from the generator
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from verl_otel.dashboards.build import reference_markdown, sync
from verl_otel.reference import commands, vocabulary

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = Path("docs/reference")


def _alerts() -> str:
    head = (
        "# Dashboards and alerts\n\n"
        "Generated from `verl_otel/dashboards/` (the same tables as `deploy/README.md`) by `make docs`: do not "
        "edit. How to change a threshold or route alerts: [The stack](../guides/stack.md).\n\n"
    )
    return head + reference_markdown().replace("\n### ", "\n## ")


PAGES: dict[str, Callable[[], str]] = {
    "cli.md": commands.markdown,
    "settings.md": vocabulary.settings_markdown,
    "metrics.md": vocabulary.metrics_markdown,
    "spans.md": vocabulary.spans_markdown,
    "alerts.md": _alerts,
}


def outputs() -> dict[Path, str]:
    return {REFERENCE / name: make() for name, make in PAGES.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail if a committed page differs from the generator")
    ap.add_argument("--root", type=Path, default=ROOT)
    args = ap.parse_args(argv)
    drift = sync(outputs(), args.root, args.check)
    stale = sorted(str(p.relative_to(args.root)) for p in (args.root / REFERENCE).glob("*.md") if p.name not in PAGES)
    if drift or stale:
        print(
            "docs/reference drifted from the code (run `make docs` and commit): " + ", ".join(drift + stale),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
