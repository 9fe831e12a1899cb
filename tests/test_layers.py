"""The data path's layering (docs/architecture.md): each folder of verl_otel imports only the layers in its
row. The model in telemetry/ never touches verl or Ray; only the runtime reaches the exporters; the readers
(analysis/, dashboards/) stand alone, so the CLI works without verl or the SDK's exporters."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "verl_otel"

#: folder -> our modules it may import (besides itself); verl_otel.semconv is open to all
OURS = {
    "semconv": (),
    "hooks": ("telemetry", "runtime", "config", "_log", "_env"),
    "telemetry": ("runtime", "config", "_log"),
    "export": ("config", "_log", "telemetry.metrics", "telemetry.text"),
    "analysis": (),
    "dashboards": (),
    "live": ("analysis", "dashboards", "telemetry.eta"),
    "native": (),
}
#: folder -> third-party top-level packages it must not import
FORBIDDEN = {
    "telemetry": ("verl", "ray", "wrapt", "prometheus_client"),
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
    for folder, allowed in OURS.items():
        files = _files(folder)
        assert files, folder
        ok = ("verl_otel." + folder, "verl_otel.semconv", *("verl_otel." + a for a in allowed))
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
