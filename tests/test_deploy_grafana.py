"""Grafana in the stack: the guard that refuses exposure with the default password (run under /bin/sh with
stand-ins for the image's entrypoint and CLI), and the provisioned datasources and dashboards (their uids
cross-checked with each other and with compose's services)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from helpers.deploy import ROOT, UI_BIND, compose, mounts, repo_yaml

from verl_otel.dashboards import panels
from verl_otel.dashboards.grafana import JAEGER_UID, PROM_UID

# -- Grafana's guard: no exposure with the default password -------------------------------------------------------
GUARD = ROOT / "deploy/grafana/guard.sh"


def test_grafana_starts_through_the_guard_with_the_ui_bind():
    grafana = compose()["services"]["grafana"]
    script = grafana["entrypoint"][-1]
    assert grafana["entrypoint"][0] == "/bin/sh" and mounts(grafana)[script] == "./deploy/grafana/guard.sh"
    env = grafana["environment"]
    assert env["VERL_OTEL_UI_BIND"] == UI_BIND and f"{UI_BIND}:3000:3000" in grafana["ports"], (
        "the guard must see the address Grafana's port is published on"
    )
    default = re.search(r":-([^}]*)\}", env["GF_SECURITY_ADMIN_PASSWORD"])[1]
    assert f'default_password="{default}"' in GUARD.read_text(), "the guard knows compose's default password"


def _guard(
    tmp_path: Path, bind: str | None, password: str | None, cli_exit: int = 0
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """guard.sh under /bin/sh with stand-ins for the image's /run.sh and `grafana` CLI that record their calls."""
    calls = tmp_path / "calls"
    for name, code in (("run.sh", 0), ("grafana", cli_exit)):
        stub = tmp_path / "bin" / name
        stub.parent.mkdir(exist_ok=True)
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\nexit {code}\n')
        stub.chmod(0o755)
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "VERL_OTEL_GRAFANA_RUN": str(tmp_path / "bin" / "run.sh"),
        "GF_PATHS_HOME": "/usr/share/grafana",
        "GF_PATHS_CONFIG": "/etc/grafana/grafana.ini",
        "GF_PATHS_DATA": "/var/lib/grafana",
    }
    if bind is not None:
        env["VERL_OTEL_UI_BIND"] = bind
    if password is not None:
        env["GF_SECURITY_ADMIN_PASSWORD"] = password
    proc = subprocess.run(["/bin/sh", str(GUARD), "--extra"], env=env, capture_output=True, text=True, timeout=30)
    return proc, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("bind", [None, "127.0.0.1", "127.0.0.2", "localhost", "::1"])
def test_grafana_guard_lets_loopback_start_with_the_default_password(tmp_path, bind):
    proc, calls = _guard(tmp_path, bind, "verl-otel")
    assert proc.returncode == 0, proc.stderr
    assert calls == ["run.sh --extra"], "the image's entrypoint runs with the arguments, nothing else"


@pytest.mark.parametrize("password", ["verl-otel", "", None])
@pytest.mark.parametrize("bind", ["0.0.0.0", "10.1.2.3", "::"])
def test_grafana_guard_refuses_exposure_with_the_default_or_no_password(tmp_path, bind, password):
    proc, calls = _guard(tmp_path, bind, password)
    assert proc.returncode == 64 and calls == []
    assert "GF_ADMIN_PASSWORD" in proc.stderr and bind in proc.stderr


def test_grafana_guard_exposed_with_a_password_writes_it_into_the_database(tmp_path):
    """The env password only applies to a new database: exposing a volume made on a laptop would keep the
    default, so the guard resets the stored admin password before Grafana starts."""
    proc, calls = _guard(tmp_path, "0.0.0.0", "s3cret pass")
    assert proc.returncode == 0, proc.stderr
    assert calls == [
        "grafana cli --homepath /usr/share/grafana --config /etc/grafana/grafana.ini --configOverrides "
        "cfg:default.paths.data=/var/lib/grafana admin reset-admin-password s3cret pass",
        "run.sh --extra",
    ]


def test_grafana_guard_stops_when_the_password_reset_fails(tmp_path):
    proc, calls = _guard(tmp_path, "0.0.0.0", "s3cret", cli_exit=3)
    assert proc.returncode == 3 and [c.split()[0] for c in calls] == ["grafana"], "fail closed: no Grafana"


# -- Grafana provisioning -------------------------------------------------------------------------------------------
def _datasources() -> dict[str, dict]:
    doc = repo_yaml("deploy/grafana/provisioning/datasources/datasources.yml")
    return {d["uid"]: d for d in doc["datasources"]}


def test_grafana_datasources_link_exemplars_and_traces():
    uids = _datasources()
    assert {PROM_UID, JAEGER_UID} <= set(uids)
    prom, jaeger = uids[PROM_UID], uids[JAEGER_UID]
    assert prom["type"] == "prometheus" and jaeger["type"] == "jaeger"
    dest = prom["jsonData"]["exemplarTraceIdDestinations"][0]
    assert dest["datasourceUid"] == JAEGER_UID and dest["name"] == "trace_id", "exemplar label the exporters write"
    assert jaeger["jsonData"]["tracesToMetrics"]["datasourceUid"] == PROM_UID
    services = compose()["services"]
    for ds, service, port in ((prom, "prometheus", 9090), (jaeger, "jaeger", 16686)):
        assert ds["url"] == f"http://{service}:{port}" and service in services


def test_grafana_dashboards_resolve_to_provisioned_datasources():
    uids = _datasources()
    prov = repo_yaml("deploy/grafana/provisioning/dashboards/dashboards.yml")
    grafana = compose()["services"]["grafana"]
    assert mounts(grafana)[prov["providers"][0]["options"]["path"]] == "./grafana"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(prov["providers"][0]["options"]["path"] + "/")
    assert (ROOT / "grafana" / Path(home).name).exists()
    for d in panels.DASHBOARDS:
        doc = json.loads((ROOT / "grafana" / f"{d.uid}.json").read_text())
        current = {v["name"]: v["current"]["value"] for v in doc["templating"]["list"] if v["type"] == "datasource"}

        def resolve(ref: dict, current: dict = current) -> str:
            m = re.fullmatch(r"\$\{(\w+)\}", ref["uid"])
            return current[m[1]] if m else ref["uid"]

        refs = [v["datasource"] for v in doc["templating"]["list"] if "datasource" in v]
        refs += [p["datasource"] for p in doc["panels"]] + [
            t["datasource"] for p in doc["panels"] for t in p.get("targets", [])
        ]
        for ref in refs:
            uid = resolve(ref)
            assert uid in uids and uids[uid]["type"] == ref["type"], (d.uid, ref)
