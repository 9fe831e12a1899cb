"""What stays process-wide (docs/architecture.md, "What stays process-wide"): every module-level object of
verl_otel that holds state after import (rebound through ``global``, changed by a function, a thread-local,
context variable, random generator, counter or weak map, a cached function) is named on the page, so the page
cannot miss one again (issue 38 item 7). The locks that guard them are left out."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "verl_otel"
DOC = ROOT.parent / "docs" / "architecture.md"

_CHANGES = {"add", "append", "extend", "update", "pop", "popitem", "clear", "setdefault", "discard", "remove",
            "insert", "appendleft", "set", "seed", "addHandler", "removeHandler", "setLevel"}  # fmt: skip
_STATEFUL = {"local", "ContextVar", "Random", "count", "WeakKeyDictionary", "WeakValueDictionary", "WeakSet"}
_CACHES = {"cache", "lru_cache"}


def _called(node: ast.expr) -> str:
    func = node.func if isinstance(node, ast.Call) else node
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _bound_locally(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    declared = {n for node in ast.walk(fn) if isinstance(node, ast.Global) for n in node.names}
    args = fn.args
    bound = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
    bound |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return bound - declared


def stateful(source: str) -> set[str]:
    """The module-level names of ``source`` that hold state after import."""
    tree = ast.parse(source)
    names: set[str] = set()
    found: set[str] = set()
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        targets = node.targets if isinstance(node, ast.Assign) else []
        targets += [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name):
                names.add(t.id)
                if isinstance(value, ast.Call) and _called(value) in _STATEFUL:
                    found.add(t.id)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            _called(d) in _CACHES for d in node.decorator_list
        ):
            found.add(node.name)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for fn in functions:
        local = _bound_locally(fn)
        for node in ast.walk(fn):
            if isinstance(node, ast.Global):
                found |= {n for n in node.names if n in names}
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CHANGES:
                owner = node.func.value
                if isinstance(owner, ast.Name) and owner.id in names and owner.id not in local:
                    found.add(owner.id)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                for t in node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]:
                    owner = t.value if isinstance(t, (ast.Subscript, ast.Attribute)) else None
                    if isinstance(owner, ast.Name) and owner.id in names and owner.id not in local:
                        found.add(owner.id)
    return found


def _section() -> str:
    text = DOC.read_text()
    return text.split("What stays process-wide", 1)[1].split("\nNone holds telemetry data", 1)[0]


def test_the_page_names_every_process_wide_object():
    section = _section()
    missing = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for name in sorted(stateful(path.read_text())):
            if f"{rel}::{name}`" not in section and not (rel in section and f"`{name}`" in section):
                missing.append(f"{rel}::{name}")
    assert not missing, f"docs/architecture.md's process-wide list misses {missing}"


def test_the_scan_sees_state_and_leaves_tables_and_locals_alone():
    source = """
import functools, threading
TABLE = {"a": 1}
TABLE.update(b=2)                 # built at import: a table, not state
_seen = set()
_current = None
_tls = threading.local()
_lock = threading.Lock()


def note(key):
    _seen.add(key)


def make():
    global _current
    _current = object()


def shadow(TABLE):
    TABLE["x"] = 1                 # the argument, not the module's


@functools.cache
def looked_up(x):
    return x
"""
    assert stateful(source) == {"_seen", "_current", "_tls", "looked_up"}
