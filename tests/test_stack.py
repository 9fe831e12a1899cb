"""`verl-otel stack write DIR`: the Docker stack from the installed package. The wheel (built here, without
network) carries docker-compose.yml, deploy/ and grafana/ as package data, byte for byte; the command run from
the unpacked wheel alone, and from the clone, writes exactly the repository's files."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from verl_otel.cli.main import main
from verl_otel.cli.stack_files import stack_files, stack_root

ROOT = Path(__file__).resolve().parent.parent


def repo_files() -> dict[str, bytes]:
    out = {"docker-compose.yml": (ROOT / "docker-compose.yml").read_bytes()}
    for part in ("deploy", "grafana"):
        out |= {str(f.relative_to(ROOT)): f.read_bytes() for f in (ROOT / part).rglob("*") if f.is_file()}
    return out


def tree(d: Path) -> dict[str, bytes]:
    return {str(f.relative_to(d)): f.read_bytes() for f in d.rglob("*") if f.is_file()}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("hatchling is not installed (pip install -e '.[test]')")
    out = tmp_path_factory.mktemp("whl")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "--disable-pip-version-check",
            str(ROOT),
            "-w",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (whl,) = out.glob("verl_otel-*.whl")
    return whl


def test_the_wheel_carries_the_stack(wheel):
    with zipfile.ZipFile(wheel) as z:
        packaged = {n[len("verl_otel/stack/") :]: z.read(n) for n in z.namelist() if n.startswith("verl_otel/stack/")}
    assert packaged == repo_files()
    assert {
        "docker-compose.yml",
        "deploy/prometheus/rules/verl-alerts.yml",
        "grafana/verl-training-progress.json",
    } <= set(packaged)


def test_stack_write_from_the_unpacked_wheel_alone(wheel, tmp_path):
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    dest = tmp_path / "stack"
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = (
        "import sys, verl_otel; from verl_otel.cli.main import main; "
        "print('FROM', verl_otel.__file__, file=sys.stderr); sys.exit(main(['stack', 'write', sys.argv[1]]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(dest)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert f"FROM {site}" in proc.stderr  # the wheel's package, not the clone
    assert tree(dest) == repo_files()
    assert proc.stdout.splitlines()[-1].startswith(f"next: cd {dest} && docker compose up -d")


def test_stack_write_from_the_clone(tmp_path, capsys):
    assert stack_root() in (ROOT, ROOT / "verl_otel" / "stack")
    assert [str(f) for f in stack_files(stack_root())] == sorted(repo_files())
    assert main(["stack", "write", str(tmp_path / "s")]) == 0
    assert tree(tmp_path / "s") == repo_files()
    out = capsys.readouterr().out
    assert f"wrote {len(repo_files())} files" in out and "  deploy/jaeger/config.yaml" in out


def test_stack_write_keeps_edited_files_unless_forced(tmp_path, capsys):
    dest = tmp_path / "s"
    assert main(["stack", "write", str(dest)]) == 0
    assert main(["stack", "write", str(dest)]) == 0  # the same files again: nothing to refuse
    edited = dest / "deploy" / "prometheus" / "prometheus.yml"
    edited.write_text("# mine\n")
    capsys.readouterr()
    assert main(["stack", "write", str(dest)]) == 1
    err = capsys.readouterr().err
    assert "deploy/prometheus/prometheus.yml" in err and "--force" in err and edited.read_text() == "# mine\n"
    assert main(["stack", "write", str(dest), "--force"]) == 0
    assert tree(dest) == repo_files()


def test_stack_needs_a_subcommand(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["stack"])
    assert ei.value.code == 2
