"""The data path's layering (docs/architecture.md): each folder of verl_otel imports only the layers in its
row. The trackers in telemetry/ never touch verl, Ray or the runtime (it is handed what it needs); only the
runtime reaches the exporters; the readers (analysis/, dashboards/) stand alone, so the CLI works without verl
or the SDK's exporters."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "verl_otel"

DOC = ROOT.parent / "docs" / "architecture.md"


def layer_rows(text: str) -> list[tuple[tuple[str, ...], tuple[str, ...] | None]]:
    """The layer table of docs/architecture.md, in its order: (its modules, e.g. ``("runtime",)`` or
    ``("hooks",)``; the modules of ours they may import, None for "anything"). A backticked name is ours when
    verl_otel has it (``telemetry.eta``); the rest (``verl``, ``ray``) are third-party."""
    section = text.split("## The layers and what each may import", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        mine = tuple(n.removesuffix("/").removesuffix(".py") for n in re.findall(r"`([^`]+)`", cells[0]))
        allowed = re.findall(r"`([^`]+)`", cells[2])
        ours = tuple(n for n in allowed if _is_ours(n))
        rows.append((mine, None if cells[2] == "anything" else ours))
    return rows


def _is_ours(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


ROWS = layer_rows(DOC.read_text())
#: folder -> third-party top-level packages it must not import
FORBIDDEN = {
    "model": ("verl", "ray", "wrapt", "prometheus_client"),
    "progress": ("verl", "ray", "wrapt", "prometheus_client"),
    "telemetry": ("verl", "ray", "wrapt", "prometheus_client"),
    "process": ("verl", "ray", "wrapt", "prometheus_client"),
    "export": ("verl", "ray", "wrapt"),
    "analysis": ("verl", "ray", "torch", "wrapt"),
    "dashboards": ("verl", "ray", "torch", "opentelemetry"),
    "semconv": ("verl", "ray", "torch", "opentelemetry"),
    "native": ("verl", "ray", "torch", "opentelemetry", "yaml"),
}


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names if node.module == "verl_otel"]
    return names


def _files(folder: str) -> list[Path]:
    single = ROOT / f"{folder}.py"
    return [single] if single.exists() else sorted((ROOT / folder).rglob("*.py"))


def test_layers_import_only_what_they_may():
    offenders = []
    for mine, allowed in ROWS:
        if allowed is None:
            continue
        ok = tuple("verl_otel." + m for m in ("semconv", *mine, *allowed))
        for folder in mine:
            files = _files(folder)
            assert files, folder
            for path in files:
                for name in _imports(path):
                    if name == "verl_otel":
                        continue
                    if name.startswith("verl_otel.") and not any(name == o or name.startswith(o + ".") for o in ok):
                        offenders.append(f"{path.relative_to(ROOT)}: {name}")
                    top = name.split(".")[0]
                    if top in FORBIDDEN.get(folder, ()):
                        offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert offenders == []


def test_the_table_has_every_module_and_points_down():
    """Every module of verl_otel is on one row (none goes unchecked, runtime.py included), and a row names only
    rows before it: the table runs from the ground up, so no import it allows runs back up or closes a circle."""
    on_rows = {p for mine, _ in ROWS for m in mine for p in _files(m)}
    assert sorted(str(p.relative_to(ROOT)) for p in set(ROOT.rglob("*.py")) - on_rows) == []
    assert {"runtime", "export", "telemetry", "hooks", "process", "config"} <= {m for mine, _ in ROWS for m in mine}
    seen: set[str] = {"semconv"}
    upward = []
    for mine, allowed in ROWS:
        seen.update(mine)
        upward += [f"{mine} -> {a}" for a in allowed or () if a.split(".")[0] not in seen]
    assert upward == []


def test_the_table_reader_sees_a_row():
    text = (
        "## The layers and what each may import\n"
        "| `a/`, `b.py` | x | `semconv`, `runtime`, `verl` |\n| `c/` | y | anything |\n## next\n| `d/` | z | `x` |\n"
    )
    assert layer_rows(text) == [(("a", "b"), ("semconv", "runtime")), (("c",), None)]


def test_the_check_sees_a_violation(tmp_path, monkeypatch):
    """The walker finds both kinds of import it polices (so an empty result above means something)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import verl.utils\nfrom verl_otel.export import flusher\nfrom verl_otel import runtime\n")
    assert _imports(bad) == ["verl.utils", "verl_otel.export", "verl_otel", "verl_otel.runtime"]


def test_semconv_modules_define_disjoint_names():
    """``sc.X`` is unambiguous: no name is defined in two modules of the vocabulary (a star re-export would
    silently keep the last one)."""
    owner: dict[str, str] = {}
    clashes = []
    for path in sorted((ROOT / "semconv").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                names = [node.name]
            for name in names:
                if name in owner and owner[name] != path.name:
                    clashes.append(f"{name}: {owner[name]} and {path.name}")
                owner.setdefault(name, path.name)
    assert len(owner) > 150 and clashes == []


def test_modules_stay_small():
    """A module past 400 lines mixes concerns: split it by what it does (docs/architecture.md). The same holds
    for the tests: a test module by subject, what several share in tests/helpers/."""
    tests = Path(__file__).resolve().parent
    modules = [*ROOT.rglob("*.py"), *tests.glob("*.py"), *(tests / "helpers").glob("*.py")]
    big = {str(p.relative_to(ROOT.parent)): n for p in modules if (n := len(p.read_text().splitlines())) > 400}
    assert big == {}


def _test_module_imports(tests: Path) -> dict[str, list[str]]:
    found = {}
    for p in sorted([*tests.glob("*.py"), *(tests / "helpers").glob("*.py")]):
        bad = [name for name in _imports(p) if name.split(".")[0].startswith(("test_", "conftest"))]
        if bad:
            found[p.name] = bad
    return found


def test_test_modules_share_through_helpers_not_each_other(tmp_path):
    """What several test modules use lives in tests/helpers/ (fixtures in conftest.py): importing another test
    module runs its module-level code and ties two subjects together."""
    assert _test_module_imports(Path(__file__).resolve().parent) == {}
    (tmp_path / "helpers").mkdir()
    (tmp_path / "test_a.py").write_text("from test_b import thing\n")
    assert _test_module_imports(tmp_path) == {"test_a.py": ["test_b"]}, "the check sees a violation"
