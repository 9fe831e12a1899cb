"""The stack's files (docker-compose.yml, deploy/, grafana/): where the installed package has them, and a copy
of them into a folder (``verl-otel stack write``; ``stack up --native`` runs on them where they are)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

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
