"""The docs: the reference pages equal what the generator makes of the code, the site builds with
``mkdocs build --strict`` (a broken link, anchor or nav entry fails it), and the README stays a short front page
whose links lead somewhere."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from helpers.procs import ROOT

from verl_otel import config, otel_env
from verl_otel import semconv as sc
from verl_otel.cli.main import build_parser
from verl_otel.reference import build, commands, vocabulary
from verl_otel.semconv import env as env_names


def _mkdocs(config_file, site, timeout=120):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        reason = "mkdocs-material is not installed (pip install 'verl-otel[docs]'; `make install` has it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: the docs must build)")
        pytest.skip(reason)
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config_file), "-d", str(site)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def test_committed_reference_pages_equal_the_generator_output():
    assert build.main(["--check"]) == 0, "run `make docs` and commit docs/reference/"


def test_check_reports_drift(tmp_path, capsys):
    for rel in build.outputs():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    assert build.main(["--check", "--root", str(tmp_path)]) == 0
    page = tmp_path / "docs/reference/metrics.md"
    page.write_text(page.read_text().replace("verl_training_step", "verl_training_stp"))
    (tmp_path / "docs/reference/gone.md").write_text("# a page no generator makes\n")
    assert build.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "docs/reference/metrics.md" in err and "docs/reference/gone.md" in err


def test_every_setting_is_documented():
    ours = {getattr(env_names, n) for n in dir(env_names) if n.startswith("ENV_")}
    documented, internal = set(sc.ENV_DOC), set(sc.ENV_INTERNAL)
    assert ours <= documented | internal, sorted(ours - documented - internal)
    assert set(config.OWN_VARIABLES) <= documented | internal
    assert not documented & internal
    # a documented OTEL_* name is one the settings check (no typo documents a variable nothing reads)
    assert {n for n in documented if n.startswith("OTEL_")} <= set(otel_env.OTEL_VARIABLES)
    page = vocabulary.settings_markdown()
    assert all(f"`{name}`" in page for name in ours | set(otel_env.OTEL_VARIABLES))


def test_every_command_metric_span_and_alert_is_on_its_page():
    cli = commands.markdown()
    for command in ("demo", "top", "slow-steps", "val-generations", "doctor", "push", "stack", "stack write"):
        assert f"## `verl-otel {command}`" in cli, command
    assert "`--per-token`" in cli and "`--hang PHASE@STEP=SECONDS`" in cli
    metrics = vocabulary.metrics_markdown()
    assert all(f"| `{m.name}` |" in metrics for m in sc.METRICS)
    assert "`worker` (deprecated name of `rollout_worker`)" in metrics
    spans = vocabulary.spans_markdown()
    for name in (sc.SPAN_STEP, sc.SPAN_ROLLOUT_SAMPLE, sc.SPAN_STALL, sc.ATTR_STALL_FRAME, sc.SPAN_ENGINE_REQUEST):
        assert f"| `{name}` |" in spans, name
    # a name's own comment in semconv is its description
    assert "| `verl.stall.frame` | attribute | innermost frame in verl's or the user's code |" in spans
    alerts = build.outputs()[build.REFERENCE / "alerts.md"]
    assert "`VerlStall`" in alerts and "`VerlEngineNoTokens`" in alerts


def test_the_site_builds_strict_and_a_broken_link_fails_it(tmp_path):
    proc = _mkdocs(ROOT / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "site/reference/metrics/index.html").is_file()
    # the same site with one broken link: strict fails and names it
    shutil.copytree(ROOT / "docs", tmp_path / "copy/docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "copy/mkdocs.yml")
    page = tmp_path / "copy/docs/guides/hangs.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    broken = _mkdocs(tmp_path / "copy/mkdocs.yml", tmp_path / "copy/site")
    assert broken.returncode != 0 and "no-such-page.md" in broken.stdout + broken.stderr


def test_readme_is_a_short_front_page():
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 200, len(lines)
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [ln.split()[:2] for ln in first_block] == [["make", "demo"], ["make", "test"]]
    assert text.index("make demo") < 300, "the two commands open the README"
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), target


def _command_lines() -> list[tuple[str, str]]:
    """(page, command) for each ``verl-otel ...`` the README and the guides give: the lines of their shell blocks
    and their inline code, without the venv prefix, comments and what follows ``&&`` or ``|``; synopses (with
    ``[``, ``|`` or ``...``) are the reference's business."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        if "reference" in page.parts:
            continue
        text = page.read_text()
        shell = [ln for b in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M) for ln in b.splitlines()]
        inline = re.findall(r"`((?:\.venv/bin/)?verl-otel [^`]+)`", text)
        for raw in [*shell, *inline]:
            line = re.split(r"\s+#|&&|\s\|\s", raw.strip())[0].strip()
            line = line.removeprefix("(").removeprefix(".venv/bin/").removeprefix(".venv-vllm/bin/")
            if line.startswith("verl-otel ") and not re.search(r"\.\.\.|\[|\||<", line):
                found.append((str(page.relative_to(ROOT)), line))
    return found


def test_every_command_the_docs_give_parses():
    lines = _command_lines()
    assert len(lines) >= 15 and any(p.startswith("docs/guides/") for p, _ in lines), lines
    parser = build_parser()
    bad = []
    for page, line in lines:
        try:
            parser.parse_args(shlex.split(line)[1:])
        except SystemExit:
            bad.append((page, line))
    assert not bad, bad


def test_stack_write_as_the_docs_give_it(tmp_path):
    """The one command of the stack's blocks that runs without Docker, as written."""
    line = next(cmd for page, cmd in _command_lines() if page == "docs/guides/stack.md")
    assert line == "verl-otel stack write ./stack"
    proc = subprocess.run(
        [sys.executable, "-m", "verl_otel.cli.main", *shlex.split(line)[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "stack/docker-compose.yml").is_file() and (tmp_path / "stack/deploy").is_dir()
