"""The stack's versions in one place each: docker-compose.yml's Collector and Jaeger images are the releases
`make stack-bin` builds from deploy/*/build/go.mod (so the tests run what compose runs), and deploy/'s configs
load in those real binaries (their `validate` subcommand)."""

from __future__ import annotations

import os
import re
import subprocess

from helpers.deploy import compose
from helpers.procs import ROOT
from helpers.real_stack import go_binaries, go_require

from verl_otel.semconv import ENV_GATEWAY_ENDPOINT

CONTRIB = "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusexporter"
JAEGER = "github.com/jaegertracing/jaeger"
CORE = "go.opentelemetry.io/collector/otelcol"


def _tag(service: str) -> str:
    return compose()["services"][service]["image"].rsplit(":", 1)[1]


def jaeger_v2(go_version: str) -> str:
    """Jaeger's Go tag v1.(N+63).P is release 2.N.P (the same commit, from 2.0 to 2.13)."""
    major, minor, patch = (int(x) for x in re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", go_version).groups())
    assert major == 1 and minor >= 63, go_version
    return f"2.{minor - 63}.{patch}"


def test_compose_runs_the_collector_stack_bin_builds():
    contrib = go_require("otelcol-verl", CONTRIB)
    assert _tag("otel-collector") == contrib.removeprefix("v"), "pin the contrib image to the go.mod's contrib"
    main_go = (ROOT / "deploy/otel-collector/build/main.go").read_text()
    assert f'const version = "{contrib.removeprefix("v")}"' in main_go


def test_compose_runs_the_jaeger_stack_bin_builds():
    assert jaeger_v2("v1.76.0") == "2.13.0" and jaeger_v2("v1.63.0") == "2.0.0"
    assert _tag("jaeger") == jaeger_v2(go_require("jaeger", JAEGER))
    for service, svc in compose()["services"].items():  # helpers reusing Jaeger's image follow it too
        if svc["image"].startswith("jaegertracing/jaeger:"):
            assert svc["image"] == compose()["services"]["jaeger"]["image"], service


def test_collector_and_jaeger_share_the_collector_core():
    assert go_require("otelcol-verl", CORE) == go_require("jaeger", CORE)
    assert go_require("otelcol-verl", CONTRIB) == go_require("jaeger", CONTRIB)


def test_deploy_configs_load_in_the_real_binaries():
    bins = go_binaries()
    env = {**os.environ, ENV_GATEWAY_ENDPOINT: "head-node:4317"}  # the agent's one required setting
    for name, config in (
        ("collector", "deploy/otel-collector/config.yaml"),
        ("collector", "deploy/otel-collector/agent.yaml"),
        ("jaeger", "deploy/jaeger/config.yaml"),
    ):
        proc = subprocess.run(
            [str(bins[name]), "validate", f"--config={ROOT / config}"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert proc.returncode == 0, f"{config}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}"
    # validate really checks: an unknown key fails
    bad = subprocess.run(
        [
            str(bins["collector"]),
            "validate",
            f"--config={ROOT / 'deploy/otel-collector/config.yaml'}",
            "--set=exporters.prometheus.no_such_key=1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "no_such_key" in bad.stdout + bad.stderr
