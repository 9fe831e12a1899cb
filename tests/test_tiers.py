"""The tiers hold (docs/testing.md): no module that starts a real verl run escapes the e2e mark (`make test-fast`
must never start one), conftest's run fixtures are seen as e2e from their own code, and a test's tier follows from
what it uses."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers.tiers import E2E_MARKS, E2E_SIGNS, INTEGRATION_SIGNS, module_marks, real_run_starts, tier_of

TESTS = Path(__file__).resolve().parent


def _modules() -> list[Path]:
    return sorted(p for p in TESTS.glob("test_*.py") if p.name != Path(__file__).name)


def test_every_module_that_starts_a_real_run_is_marked_e2e():
    escaped = {
        p.name: starts for p in _modules() if (starts := real_run_starts(p)) and not module_marks(p) & set(E2E_MARKS)
    }
    assert escaped == {}, f"add `pytestmark = pytest.mark.e2e` (or `verl`) to these modules: {escaped}"


def test_the_scan_finds_what_starts_a_run():
    """The scan is not vacuous: the modules known to start their own runs are found, and marked."""
    found = {p.name for p in _modules() if real_run_starts(p)}
    assert {"test_e2e_stalls.py", "test_e2e_chaos.py", "test_e2e_vllm.py", "test_e2e_real_stack.py"} <= found
    assert module_marks(TESTS / "test_e2e_stalls.py") & set(E2E_MARKS)


def _fixtures(path: Path) -> dict[str, str]:
    """name -> source of each pytest fixture defined at a file's top level."""
    text = path.read_text()
    out = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
            out[node.name] = ast.get_source_segment(text, node) or ""
    return out


def test_conftests_run_fixtures_are_e2e_from_their_own_code():
    """A session run fixture (conftest's ``*_run`` and ``*_run_N``) makes every test that asks for it e2e without
    a list to keep: its source starts the run."""
    runs = {n: s for n, s in _fixtures(TESTS / "conftest.py").items() if n.endswith("_run") or "_run_" in n}
    assert {"v1_run", "legacy_run", "fully_async_run", "real_stack_run"} <= set(runs)
    assert {n: tier_of([], [s]) for n, s in runs.items()} == dict.fromkeys(runs, "e2e")


@pytest.mark.parametrize(
    "marks,source,tier",
    [
        ([], "def test_x():\n    assert 1 + 1 == 2", "unit"),
        (["verl"], "def test_x(): pass", "e2e"),
        (["e2e"], "def test_x(): pass", "e2e"),
        (["prometheus"], "def test_x(): pass", "integration"),
        ([], f"def test_x(tmp_path):\n    {E2E_SIGNS[0]}tmp_path, 'v1', 2, [], scrape=False)", "e2e"),
        ([], "def test_x(prom_factory):\n    prom_factory(config={})", "integration"),
        ([], "def test_x(tmp_path):\n    run_py(['-c', 'pass'], {}, tmp_path)", "integration"),
        (["prometheus"], f"def f():\n    {E2E_SIGNS[1]}steps=2)", "e2e"),  # the highest tier wins
    ],
)
def test_a_tests_tier_follows_from_what_it_uses(marks, source, tier):
    assert tier_of(marks, [source]) == tier


def test_every_test_has_exactly_one_tier(request):
    assert [m.name for m in request.node.iter_markers() if m.name in ("unit", "integration", "e2e")] == ["unit"]
    assert INTEGRATION_SIGNS and not set(INTEGRATION_SIGNS) & set(E2E_SIGNS)
