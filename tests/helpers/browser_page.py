"""A page opened in a real headless Chromium (Debian's ``chromium``, `make chromium`): what its console said (any
line is a failure: our pages log nothing), its DOM after its script ran, and a screenshot's pixels. Without a
Chromium the tests skip; under ``CI=true`` that is a failure."""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest

from verl_otel.cli import browser

_CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]? ?(.*)")


def chromium() -> str:
    found = browser.find()
    if found is None:
        reason = "no headless Chromium (`make chromium`, or apt-get install chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: the browser tests must run)")
        pytest.skip(reason)
    return found


def open_page(page: Path) -> tuple[str, list[str]]:
    """The page's DOM after its script ran, and every line its console printed (errors, uncaught exceptions)."""
    got = browser.run(chromium(), ["--enable-logging=stderr", "--v=0", "--dump-dom", page.resolve().as_uri()])
    assert got.returncode == 0, got.stderr[-2000:]
    console = [m.group(1) for line in got.stderr.splitlines() if (m := _CONSOLE.search(line))]
    return got.stdout, console


def colours(png: Path) -> Counter[tuple[int, int, int]]:
    """How many pixels of the screenshot have each colour."""
    from PIL import Image

    with Image.open(png) as img:
        rgb = img.convert("RGB")
        return Counter({c: n for n, c in rgb.getcolors(rgb.width * rgb.height) or []})


def hex_rgb(colour: str) -> tuple[int, int, int]:
    c = colour.lstrip("#")
    return int(c[0:2], 16), int(c[2:4], 16), int(c[4:6], 16)
