"""What is hooked in this process, said once per process role when it is wired:

    verl 0.9.1: 10/19 trainer hooks (9 in modules not imported here); off: none

Every registered target of that process role counts in M; a target is *off* when its version range excludes the
installed verl, its module is not in verl (moved), its function is not in its module (renamed), or our
wrapper could not be put on it. Targets whose module exists but is not imported in this process (another
trainer's, fully_async's) are neither hooked nor off: they are hooked if it ever is imported.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from verl_otel._log import logger
from verl_otel.hooks import registry
from verl_otel.hooks.registry import HookTarget

MAX_LINE = 1500  # characters: a verl far from ours must not flood the log


def process_role_of(target: HookTarget) -> str | None:
    """The process role a target runs in: a field of its row (hooks/targets.py)."""
    return target.process_role


def module_exists(name: str) -> bool:
    """Whether ``name`` is importable, found on disk without importing it (nor its packages)."""
    if name in sys.modules:
        return True
    from importlib.machinery import PathFinder

    parts = name.split(".")
    start, path = 0, None  # None: sys.path, for a top-level package
    for i in range(len(parts) - 1, 0, -1):  # the deepest package already imported
        parent = sys.modules.get(".".join(parts[:i]))
        if parent is not None:
            start, path = i, getattr(parent, "__path__", None)
            if path is None:
                return False  # a module, not a package
            break
    try:
        for j in range(start, len(parts)):
            if j > start and path is None:
                return False
            spec = PathFinder.find_spec(".".join(parts[: j + 1]), path)
            if spec is None:
                return False
            path = spec.submodule_search_locations
    except Exception:  # noqa: BLE001 - an odd finder: assume it is there (it is hooked if it imports)
        return True
    return True


def _why_off(target: HookTarget, version: str | None, off: dict[str, str]) -> str | None:
    if target.key in off:
        return off[target.key]
    if not registry._in_range(target, version):
        if registry._in_range(replace(target, max_verl=None), version):
            return f"verl < {target.max_verl} only"
        return f"needs verl >= {target.min_verl}"
    if target.module not in sys.modules and not module_exists(target.module):
        return f"{target.module} not in verl {version}: moved?"
    return None


def line(process_role: str) -> tuple[str, bool]:
    """The start-up line of ``process_role`` in this process, and whether something is off for a reason other
    than the installed verl's version (renamed, moved, failed: worth a warning)."""
    version = registry.verl_version()
    hooked, off = set(registry.installed()), registry.off_reasons()
    mine = [t for t in registry.registered() if process_role_of(t) == process_role]
    n = sum(t.key in hooked for t in mine)
    by_reason: dict[str, list[str]] = {}
    waiting = 0
    for t in mine:
        if t.key in hooked:
            continue
        reason = _why_off(t, version, off)
        if reason is None:
            waiting += 1
        elif t.feature not in by_reason.setdefault(reason, []):
            by_reason[reason].append(t.feature)
    text = f"verl {version or '(not installed)'}: {n}/{len(mine)} {process_role} hooks"
    if waiting:
        text += f" ({waiting} in modules not imported here)"
    parts = [f"{', '.join(features)} ({reason})" for reason, features in by_reason.items()]
    text += "; off: " + ("; ".join(parts) if parts else "none")
    if len(text) > MAX_LINE:
        text = text[: MAX_LINE - 3] + "..."
    return text, any(not r.startswith(("needs verl", "verl <")) for r in by_reason)


def report(process_role: str) -> None:
    """Log the process role's start-up line (the runtime calls this once per process role: hooks/targets.py)."""
    text, bad = line(process_role)
    (logger.warning if bad else logger.info)(text)
    registry.reported()
