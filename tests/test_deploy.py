"""The stack's files, checked with the strongest real tools here (there is no Docker engine, Jaeger,
Grafana or Collector binary on these machines): the compose spec's JSON schema, promtool, a real
Prometheus parsing every expression, and the structure the Collector and Grafana docs require."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from prom_server import PromServer, available

from verl_otel import semconv as sc
from verl_otel.dashboards import all_expressions, build, panels
from verl_otel.dashboards.alerts import Thresholds
from verl_otel.dashboards.model import JAEGER_UID, PROM_UID

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
needs_promtool = pytest.mark.skipif(not available(), reason="promtool not installed (make test installs it)")


def _compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_validates_against_the_spec_and_mounts_exist():
    schema = json.loads((SHARED / "schemas" / "compose-spec.json").read_text())
    doc = _compose()
    jsonschema.validate(doc, schema)
    for name, svc in doc["services"].items():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("./"):
                assert (ROOT / src).exists(), f"{name} mounts missing {src}"
        assert ":" in svc["image"] and not svc["image"].endswith(":latest"), f"{name}: pin the image"
        for port in svc.get("ports", []):
            assert port.startswith("${VERL_OTEL_BIND:-127.0.0.1}:"), f"{name} publishes {port} beyond loopback"
        if "profiles" not in svc:
            assert "healthcheck" in svc, f"{name} has no health check"
    jaeger_tag = doc["services"]["jaeger"]["image"].split(":")[1]
    major, minor, _ = (int(x) for x in jaeger_tag.split("."))
    assert major == 2 and minor <= 20, "Grafana's Jaeger datasource needs the legacy search API (Jaeger <= 2.20)"
    graf = doc["services"]["grafana"]["environment"]
    assert graf["GF_AUTH_ANONYMOUS_ENABLED"] == "false" and "GF_ADMIN_PASSWORD" in graf["GF_SECURITY_ADMIN_PASSWORD"]
    assert "--enable-feature=exemplar-storage" in doc["services"]["prometheus"]["command"]
    assert {"gpu", "pull"} <= {p for s in doc["services"].values() for p in s.get("profiles", [])}


@needs_promtool
@pytest.mark.parametrize("config", ["prometheus.yml", "prometheus-pull.yml"])
def test_promtool_check_config(config):
    proc = subprocess.run(["promtool", "check", "config", "--syntax-only", str(ROOT / "deploy/prometheus" / config)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_promtool_check_and_unit_test_rules(tmp_path):
    rules = ROOT / "deploy/prometheus/rules/verl-alerts.yml"
    proc = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert proc.returncode == 0 and "9 rules found" in proc.stdout, proc.stdout + proc.stderr
    tests = ROOT / "deploy/prometheus/tests/verl-alerts.test.yml"
    proc = subprocess.run(["promtool", "test", "rules", str(tests)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tested = set(re.findall(r"alertname: (\w+)", tests.read_text()))
    assert tested == set(re.findall(r"alert: (\w+)", rules.read_text())), "every rule needs a promtool test"


@needs_promtool
def test_thresholds_can_be_overridden(tmp_path):
    out = tmp_path / "rules.yml"
    assert build.main(["--threshold", "kl_max=0.2", "--threshold", "rollout_stall_window=30m",
                       "--rules-out", str(out)]) == 0
    text = out.read_text()
    assert "> 0.2" in text and "[30m]" in text
    assert subprocess.run(["promtool", "check", "rules", str(out)], capture_output=True).returncode == 0
    with pytest.raises(ValueError, match="unknown threshold"):
        Thresholds.with_overrides(["nope=1"])


def test_collector_config_structure():
    cfg = yaml.safe_load((ROOT / "deploy/otel-collector/config.yaml").read_text())
    defined = {kind: set(cfg.get(kind, {})) for kind in ("receivers", "processors", "exporters", "connectors")}
    for name, pipe in cfg["service"]["pipelines"].items():
        for r in pipe["receivers"]:
            assert r in defined["receivers"] | defined["connectors"], (name, r)
        for p in pipe.get("processors", []):
            assert p in defined["processors"], (name, p)
        for e in pipe["exporters"]:
            assert e in defined["exporters"] | defined["connectors"], (name, e)
        assert pipe.get("processors", ["memory_limiter"])[0] == "memory_limiter", f"{name}: memory_limiter first"
    removed = {"jaeger", "logging", "jaeger_thrift"}
    assert not {e.split("/")[0] for e in defined["exporters"]} & removed
    assert cfg["exporters"]["prometheus"]["enable_open_metrics"] is True
    assert cfg["exporters"]["prometheus"]["resource_to_telemetry_conversion"]["enabled"] is True
    assert cfg["exporters"]["otlp/jaeger"]["endpoint"].startswith("jaeger:")
    for proto in ("grpc", "http"):
        assert cfg["receivers"]["otlp"]["protocols"][proto]["endpoint"].startswith("0.0.0.0:")
    buckets = cfg["connectors"]["spanmetrics"]["histogram"]["explicit"]["buckets"]
    assert buckets[0] == "1s" and buckets[-1].endswith("h")
    used = {e for p in cfg["service"]["pipelines"].values() for e in p["exporters"] + p["receivers"]}
    assert "spanmetrics" in used


def test_grafana_provisioning_matches_dashboards():
    ds = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/datasources.yml").read_text())
    uids = {d["uid"]: d for d in ds["datasources"]}
    assert {PROM_UID, JAEGER_UID} <= set(uids)
    assert uids[PROM_UID]["jsonData"]["exemplarTraceIdDestinations"][0]["datasourceUid"] == JAEGER_UID
    assert uids[JAEGER_UID]["jsonData"]["tracesToMetrics"]["datasourceUid"] == PROM_UID
    prov = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/dashboards.yml").read_text())
    mount = [v for v in _compose()["services"]["grafana"]["volumes"] if v.startswith("./grafana:")][0]
    assert prov["providers"][0]["options"]["path"] == mount.split(":")[1]
    for path in (ROOT / "grafana").glob("*.json"):
        doc = json.loads(path.read_text())
        for panel in doc["panels"]:
            assert panel["datasource"]["uid"] in uids, (path.name, panel["title"])
            for t in panel.get("targets", []):
                assert t["datasource"]["uid"] in uids


def test_dashboards_are_generated_and_not_drifted():
    assert build.main(["--check"]) == 0, "run `make dashboards` and commit"
    for d in panels.DASHBOARDS:
        doc = json.loads((ROOT / "grafana" / f"{d.uid}.json").read_text())
        ids = [p["id"] for p in doc["panels"]]
        assert len(ids) == len(set(ids))
        assert all(p["description"].strip() for p in doc["panels"])
        assert {v["name"] for v in doc["templating"]["list"]} == {"project", "experiment", "instance"}
        assert doc["schemaVersion"] == 39


_EXTERNAL = {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"}
_FUNCS = {"sum", "max", "min", "avg", "by", "on", "and", "or", "rate", "histogram_quantile", "clamp_min", "time",
          "changes", "max_over_time", "quantile_over_time", "avg_over_time", "label_values", "group_left", "unless"}


def test_every_metric_in_every_expression_is_defined_in_semconv():
    names = {m.name for m in sc.METRICS}
    names |= {f"{m.name}_{s}" for m in sc.METRICS if m.kind == "histogram" for s in ("bucket", "sum", "count")}
    labels = {lbl for m in sc.METRICS for lbl in m.labels} | {"le", "instance", "job", sc.LABEL_PROJECT,
                                                                sc.LABEL_EXPERIMENT, "e"}  # e: 2^30 style numbers
    for where, expr, _ in all_expressions():
        stripped = re.sub(r'\{[^}]*\}|"[^"]*"|\[[^\]]*\]', "", expr)
        for ident in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", stripped):
            if ident in _FUNCS or ident in labels:
                continue
            assert ident in names or ident in _EXTERNAL, (where, ident)


@pytest.fixture(scope="module")
def empty_prom(tmp_path_factory):
    if not available():
        pytest.skip("prometheus not installed (make test installs it)")
    d = tmp_path_factory.mktemp("prom-parse")
    (d / "targets.json").write_text("[]")
    with PromServer(d, d / "targets.json") as prom:
        yield prom


def test_every_expression_parses_in_real_prometheus(empty_prom):
    for where, expr, _ in all_expressions():
        concrete = expr.replace("$__rate_interval", "1m").replace("$project", ".*").replace(
            "$experiment", ".*").replace("$instance", ".*")
        empty_prom.query(concrete)  # raises ValueError with Prometheus' parse error
