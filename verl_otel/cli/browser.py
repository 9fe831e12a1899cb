"""A headless Chromium, where one is installed (Debian's ``chromium``): a page turned into a PNG for
``verl-otel timeline --png``. Started with a fresh profile and none of its background networking, so it runs on a
machine with no network and leaves nothing behind."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: what a closed network needs: no background connections, no component or sync updates, no GPU, no sandbox (root)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def find() -> str | None:
    """The first of :data:`NAMES` on PATH."""
    return next((p for p in map(shutil.which, NAMES) if p), None)


def run(browser: str, args: list[str], timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    """One headless run with a fresh profile (removed after), its output captured."""
    with tempfile.TemporaryDirectory(prefix="verl-otel-chromium-") as profile:
        return subprocess.run(
            [browser, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )


def screenshot(page: Path, png: Path, width: int, height: int, browser: str | None = None) -> str | None:
    """``page`` rendered into ``png`` at ``width`` x ``height``; None when done, else one line saying why not."""
    browser = browser or find()
    if browser is None:
        return f"no headless Chromium found ({', '.join(NAMES)}, or --browser PATH): no PNG written"
    png.unlink(missing_ok=True)
    try:
        got = run(
            browser, [f"--screenshot={png.resolve()}", f"--window-size={width},{height}", page.resolve().as_uri()]
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{browser} could not render the page ({err}): no PNG written"
    if not png.exists() or png.stat().st_size == 0:
        tail = (got.stderr or "").strip().splitlines()[-1:] or [f"exit status {got.returncode}"]
        return f"{browser} wrote no PNG ({tail[0][:200]})"
    return None
