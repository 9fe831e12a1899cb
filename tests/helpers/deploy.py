"""The stack's files as the deploy tests read them (tests/test_deploy_*.py): the repository's YAML,
docker-compose.yml with compose's ``${VAR:-default}`` defaults, a service's mounts, and the two bind addresses
compose publishes ports on."""

from __future__ import annotations

import re

import yaml

from helpers.procs import ROOT

OTLP_BIND = "${VERL_OTEL_OTLP_BIND:-127.0.0.1}"
UI_BIND = "${VERL_OTEL_UI_BIND:-127.0.0.1}"


def repo_yaml(rel: str):
    return yaml.safe_load((ROOT / rel).read_text())


def compose():
    return repo_yaml("docker-compose.yml")


def env_default(value: str) -> str:
    """``${VAR:-default}`` -> ``default`` (what compose uses when VAR is unset)."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def mounts(svc: dict) -> dict[str, str]:
    """container path -> host path of a service's bind mounts and named volumes (defaults applied)."""
    out = {}
    for vol in svc.get("volumes", []):
        src, dst = env_default(vol).split(":")[:2]
        out[dst] = src
    return out
