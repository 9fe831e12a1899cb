"""The environment of `make test-min`: the OpenTelemetry and prometheus-client releases pyproject.toml declares
as its floors, everything else (verl, torch, pytest) from the main venv.

    python tests/min_env.py pins              # "opentelemetry-sdk==1.28.0 ..." from pyproject's ">=" floors
    python tests/min_env.py link MIN_VENV MAIN_VENV   # .pth files: this checkout, then MAIN_VENV's packages

The min venv's own site-packages (the floors and what they pulled in) come first on sys.path, the main venv's
after them, so every package the floors name is the floor's, not the main venv's; tests/test_min_versions.py
checks that in the run.
"""

from __future__ import annotations

import re
import sys
import sysconfig
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREFIXES = ("opentelemetry-", "prometheus-client")


def floors() -> dict[str, str]:
    """Package -> its declared minimum, for the OTel and prometheus packages of pyproject's dependencies."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for dep in deps:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([^,;\s]+)\s*", dep)
        if m and m[1].lower().startswith(PREFIXES):
            out[m[1].lower()] = m[2]
    return out


def _site_packages(venv: Path) -> Path:
    rel = Path(sysconfig.get_path("purelib")).relative_to(sysconfig.get_path("data"))
    return venv / rel


def _dist_name(entry: str) -> str:
    return re.sub(r"[-_.]+", "_", entry.split("-", 1)[0]).lower()


def main_view(site: Path, main_site: Path, view: Path) -> None:
    """``view``: links to the main venv's packages, without those the min venv has (by top-level name, and
    dist-info by distribution): ``opentelemetry`` and ``google`` are namespace packages, which Python would
    otherwise merge across both venvs (a 1.27 ``opentelemetry.sdk`` with a 1.45 module in it)."""
    mine = {e.name for e in site.iterdir()}
    mine_dists = {_dist_name(e.name) for e in site.iterdir() if e.name.endswith(".dist-info")}
    view.mkdir()
    for entry in main_site.iterdir():
        if entry.name in mine or entry.suffix == ".pth" or entry.name == "__pycache__":
            continue
        if entry.name.endswith(".dist-info") and (
            _dist_name(entry.name) in mine_dists or entry.name.startswith("opentelemetry")
        ):
            continue
        (view / entry.name).symlink_to(entry.resolve())


def link(min_venv: Path, main_venv: Path) -> None:
    site = _site_packages(min_venv)
    main_view(site, _site_packages(main_venv), min_venv / "main-view")
    # alphabetical order is the order site runs them: the checkout, the start-up hook, then the main venv
    (site / "_verl_otel_checkout.pth").write_text(f"{ROOT}\n")
    (site / "verl_otel_autoload.pth").write_text((ROOT / "verl_otel/_pth/verl_otel_autoload.pth").read_text())
    (site / "zz_main_venv.pth").write_text(f"{(min_venv / 'main-view').resolve()}\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["pins"]:
        print(" ".join(f"{name}=={version}" for name, version in floors().items()))
    elif sys.argv[1:2] == ["link"] and len(sys.argv) == 4:
        link(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit(__doc__)
