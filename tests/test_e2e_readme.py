"""The commands after `make demo` of the README and the docs' quickstart (the same block), as written, in a fresh
shell (no venv on PATH, none of the test process' environment), against the real demo's output (the shared v1 run,
where `make demo` would leave it)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from helpers.procs import ROOT

pytestmark = pytest.mark.verl


def after_make_demo(page: str = "README.md", section: str = "## The CPU demo") -> list[str]:
    """The command lines of a page's first shell block after its demo section's "Then"."""
    text = (ROOT / page).read_text()
    assert section in text, f"{page} lost its section {section!r}"
    block = re.search(r"Then.*?```bash\n(.*?)```", text.split(section, 1)[1], re.S)
    assert block, f"{page} lost its commands after make demo"
    return [ln.split("  #", 1)[0].strip() for ln in block[1].splitlines() if ln.strip()]


def test_the_docs_quickstart_gives_the_readmes_commands():
    assert after_make_demo("docs/getting-started/quickstart.md", "# Quickstart") == after_make_demo()


def test_readme_commands_in_a_fresh_shell(v1_run, tmp_path):
    assert v1_run.rc == 0, v1_run.log_tail()
    lines = after_make_demo()
    assert lines[0] == "source .venv/bin/activate" and any(ln.startswith("verl-otel top") for ln in lines)
    # a checkout after `make demo`: the venv and ./verl-otel-data where the README says they are
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "verl-otel-data").symlink_to(v1_run.out)
    fresh = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "TERM": "xterm"}
    # the live view runs until Ctrl-C: send it SIGINT after a few frames, as a user would
    script = "\n".join(
        f"timeout --preserve-status -s INT 6 {ln}" if ln.startswith("verl-otel top") else ln
        for ln in ["set -e", *lines]
    )
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", script],
        cwd=tmp_path,
        env=fresh,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "slowest of 3 steps of service 'verl'" in out and "#1 step 3 " in out
    assert re.search(r"^step 2  score \S+  data source openai/gsm8k", out, re.M)
    assert "verl-otel top" in out and "Traceback" not in proc.stderr
    # and without activating: the other way the README gives
    plain = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", ".venv/bin/" + lines[1]],
        cwd=tmp_path,
        env=fresh,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plain.returncode == 0 and "#1 step 3 " in plain.stdout, plain.stderr
