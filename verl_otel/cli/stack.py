"""``verl-otel stack write DIR``: writes the Docker stack (docker-compose.yml, deploy/: Collector, Jaeger,
Prometheus with the alert rules, Grafana provisioning; grafana/: the dashboards) from the installed package,
so ``pip install verl-otel`` users get it without a clone. Then ``cd DIR && docker compose up -d``."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from verl_otel.cli import stack_native

PROG = "verl-otel stack"
COMPOSE = "docker-compose.yml"
#: what the stack is made of, relative to its root (the repo's top level; verl_otel/stack/ in the wheel)
PARTS = (COMPOSE, "deploy", "grafana")


def stack_root() -> Path:
    """Where the stack files are: the wheel carries them as package data under verl_otel/stack/ (pyproject's
    force-include); a clone (or its editable install) has them at the top of the repository."""
    packaged = resources.files("verl_otel") / "stack"
    if packaged.is_dir() and (packaged / COMPOSE).is_file():
        return Path(str(packaged))
    repo = Path(__file__).resolve().parents[2]
    if (repo / COMPOSE).is_file():
        return repo
    raise FileNotFoundError(f"the stack files are not installed (no {COMPOSE} under {packaged} or {repo})")


def stack_files(root: Path) -> list[Path]:
    """The stack's files, relative to ``root``, sorted."""
    out = []
    for part in PARTS:
        p = root / part
        out += (
            [f.relative_to(root) for f in sorted(p.rglob("*")) if f.is_file() and "__pycache__" not in f.parts]
            if p.is_dir()
            else [Path(part)]
        )
    return sorted(out)


def write(dest: Path, force: bool = False) -> list[Path]:
    """Copy the stack into ``dest``; refuses (FileExistsError naming them) to replace files that differ."""
    root = stack_root()
    files = stack_files(root)
    clash = [f for f in files if (dest / f).exists() and (dest / f).read_bytes() != (root / f).read_bytes()]
    if clash and not force:
        raise FileExistsError(", ".join(map(str, clash)))
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        (dest / f).write_bytes((root / f).read_bytes())
    return files


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
