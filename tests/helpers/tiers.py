"""The test tiers (docs/testing.md): ``unit`` (in the test process: seconds in all), ``integration`` (outside it:
real servers (Prometheus, promtool, the Collector, Jaeger), Ray without verl's trainer, or a fresh Python process
that starts up as verl's do, through the .pth hook: seconds each), ``e2e`` (real verl runs: minutes each). conftest.py
gives every test exactly one, derived from what it uses: its marks (``verl`` is ``e2e``), the fixtures it asks for
and the source of its function and of those fixtures. tests/test_tiers.py checks that no module that starts a
real run escapes ``e2e``."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

TIERS = ("unit", "integration", "e2e")
E2E_MARKS = ("e2e", "verl")  # `verl` is the name the e2e tier had first: both select it
INTEGRATION_MARKS = ("integration", "prometheus")

# what starts a real verl run (the demo in a thread or a process, verl's entry point, the helpers around them)
E2E_SIGNS = (
    "start_demo(",
    "run_demo(",
    "main_ppo",
    "vllm_demo_cmd(",
    "refused_until_after(",
    "helpers.real_stack_run",
    "real_stack_vllm.start(",
)
# what starts a real server, Ray without verl's trainer, or a fresh Python process
INTEGRATION_SIGNS = (
    "run_py(",
    "sys.executable",
    "VLLM_PY",
    "vllm_python(",
    "prom_factory",
    "PromServer(",
    "promtool",
    "amtool",
    "ray_init(",
    "ray.init(",
    '"ray", "start"',
    "drive_async.py",
    "drive_reward_batch.py",
    "go_binaries(",
    "system_binaries(",
)


# pytest-timeout's limit (pyproject: 900 s a test, its fixtures' setup included) for the modules whose shared
# run takes longer: each real vLLM run's fixture allows its subprocess 1,200 s; the real stack's run holds a
# 150 s hang and waits on the Collector's and Jaeger's restarts
TIMEOUT_S = {"test_e2e_vllm_async.py": 1500, "test_e2e_real_stack.py": 1500}


@cache
def _source(func: Any) -> str:
    try:
        return inspect.getsource(func)
    except (OSError, TypeError):  # a builtin or a generated function: nothing to read
        return ""


def tier_of(marks: Iterable[str], sources: Iterable[str]) -> str:
    """The tier of a test with these mark names whose function and fixtures have these sources."""
    names = set(marks)
    text = "\n".join(sources)
    if names & set(E2E_MARKS) or any(s in text for s in E2E_SIGNS):
        return "e2e"
    if names & set(INTEGRATION_MARKS) or any(s in text for s in INTEGRATION_SIGNS):
        return "integration"
    return "unit"


def item_tier(item: Any) -> str:
    """A collected test's tier: its marks, its function's source and the source of every fixture it uses
    (conftest's session runs included, so a new run fixture needs no list to be counted)."""
    funcs = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for defs in getattr(info, "name2fixturedefs", {}).values():
        funcs += [d.func for d in defs]
    return tier_of((m.name for m in item.iter_markers()), (_source(f) for f in funcs if f is not None))


def module_marks(path: Path) -> set[str]:
    """The mark names a test module applies to all its tests (``pytestmark = pytest.mark.X`` or a list of them)."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            for sub in ast.walk(node.value):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute) and sub.value.attr == "mark":
                    names.add(sub.attr)
    return names


def real_run_starts(path: Path) -> list[str]:
    """The things in a module's source that start a real verl run."""
    text = path.read_text()
    return [s for s in E2E_SIGNS if s in text]
