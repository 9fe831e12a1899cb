"""The stack's files, checked with the strongest real tools here (there is no Docker engine, Jaeger, Grafana or
Collector binary on these machines): the compose spec's JSON schema, promtool, real Prometheus servers for the
pull path, and the structure the Collector, Jaeger and Grafana configurations require (cross-checked with
each other: ports, service names, datasource uids)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from prom_server import MetricsEndpoint, available, prom_factory  # noqa: F401 (prom_factory is a fixture)

from verl_otel import semconv as sc
from verl_otel.dashboards import panels
from verl_otel.dashboards.model import JAEGER_UID, PROM_UID

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PROM_DIR = ROOT / "deploy/prometheus"
needs_promtool = pytest.mark.skipif(not available(), reason="promtool not installed (`make prometheus` installs it)")


def _yaml(rel: str):
    return yaml.safe_load((ROOT / rel).read_text())


def _compose():
    return _yaml("docker-compose.yml")


def _default(value: str) -> str:
    """``${VAR:-default}`` -> ``default`` (what compose uses when VAR is unset)."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def _mounts(svc: dict) -> dict[str, str]:
    """container path -> host path of a service's bind mounts and named volumes (defaults applied)."""
    out = {}
    for vol in svc.get("volumes", []):
        src, dst = _default(vol).split(":")[:2]
        out[dst] = src
    return out


# -- docker-compose.yml -----------------------------------------------------------------------------------------
def test_compose_validates_against_the_compose_spec():
    schema_path = SHARED / "schemas" / "compose-spec.json"
    if not schema_path.exists():
        pytest.skip(f"{schema_path} not present (shared/ sits beside the repository)")
    schema = json.loads(schema_path.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(_compose()), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_compose_mounts_exist_and_volumes_are_declared():
    doc = _compose()
    declared = set(doc.get("volumes", {}))
    for name, svc in doc["services"].items():
        for dst, src in _mounts(svc).items():
            if src.startswith("./"):
                if src.rstrip("/") == "./verl-otel-data":  # the run writes it; compose creates it if missing
                    continue
                assert (ROOT / src).exists(), f"{name} mounts missing {src} at {dst}"
            else:
                assert src in declared, f"{name}: volume {src} not declared"


def test_compose_services_are_pinned_local_and_health_checked():
    doc = _compose()
    for name, svc in doc["services"].items():
        image = svc["image"]
        assert re.search(r":[\w.-]*\d[\w.-]*$", image) and not image.endswith(":latest"), f"{name}: pin {image}"
        for port in svc.get("ports", []):
            assert port.startswith("${VERL_OTEL_BIND:-127.0.0.1}:"), f"{name} publishes {port} beyond loopback"
        assert "healthcheck" in svc and svc["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
        if svc.get("network_mode") == "host":
            assert not svc.get("ports"), f"{name}: host networking publishes nothing"
            assert any("127.0.0.1:" in arg for arg in svc["command"]), f"{name}: listen on loopback on the host"
    assert {"gpu", "pull"} <= {p for s in doc["services"].values() for p in s.get("profiles", [])}


def test_compose_image_versions_and_settings_the_stack_depends_on():
    svc = _compose()["services"]
    version = lambda s: tuple(int(x) for x in re.findall(r"\d+", svc[s]["image"].split(":")[1])[:3])  # noqa: E731
    assert (2, 0, 0) <= version("jaeger") <= (2, 20, 99), "Grafana's Jaeger datasource needs Jaeger v2 <= 2.20"
    assert (0, 115, 0) <= version("otel-collector") < (1, 0, 0) and "contrib" in svc["otel-collector"]["image"]
    assert version("grafana")[0] == 11
    graf = svc["grafana"]["environment"]
    assert graf["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert graf["GF_SECURITY_ADMIN_PASSWORD"] == "${GF_ADMIN_PASSWORD:-verl-otel}"
    prom = svc["prometheus"]["command"]
    for flag in ("--enable-feature=exemplar-storage", "--web.enable-lifecycle", "--web.enable-remote-write-receiver"):
        assert flag in prom
    config = next(a.split("=", 1)[1] for a in prom if a.startswith("--config.file="))
    assert _mounts(svc["prometheus"])[config] == "./deploy/prometheus/prometheus.yml"
    assert _mounts(svc["prometheus"])["/etc/prometheus/rules"] == "./deploy/prometheus/rules"
    pull = svc["prometheus-pull"]
    assert pull["profiles"] == ["pull"] and "--enable-feature=agent" in pull["command"]
    assert _mounts(pull)["/verl-otel-data"] == "./verl-otel-data"
    assert svc["dcgm-exporter"]["profiles"] == ["gpu"]
    assert "--config=/etc/otelcol-contrib/config.yaml" in svc["otel-collector"]["command"]
    assert _mounts(svc["otel-collector"])["/etc/otelcol-contrib/config.yaml"] == "./deploy/otel-collector/config.yaml"
    assert _mounts(svc["jaeger"])["/etc/jaeger/config.yaml"] == "./deploy/jaeger/config.yaml"


# -- the Collector ----------------------------------------------------------------------------------------------
def test_collector_pipelines_use_only_defined_current_components():
    cfg = _yaml("deploy/otel-collector/config.yaml")
    defined = {kind: set(cfg.get(kind) or {}) for kind in ("receivers", "processors", "exporters", "connectors")}
    used_as: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    for name, pipe in cfg["service"]["pipelines"].items():
        for r in pipe["receivers"]:
            assert r in defined["receivers"] | defined["connectors"], (name, r)
            used_as["receivers"].add(r)
        for p in pipe.get("processors", []):
            assert p in defined["processors"], (name, p)
            used_as["processors"].add(p)
        for e in pipe["exporters"]:
            assert e in defined["exporters"] | defined["connectors"], (name, e)
            used_as["exporters"].add(e)
        assert pipe["processors"][0] == "memory_limiter", f"{name}: memory_limiter must come first"
        assert pipe["processors"][-1] == "batch", f"{name}: batch last"
    for conn in defined["connectors"]:  # a connector is an exporter of one pipeline and a receiver of another
        assert conn in used_as["exporters"] and conn in used_as["receivers"], conn
    for kind in ("receivers", "processors", "exporters"):
        assert defined[kind] <= used_as[kind], f"defined but unused {kind}: {defined[kind] - used_as[kind]}"
    assert set(cfg["service"]["extensions"]) == set(cfg["extensions"])
    removed = {"jaeger", "logging", "jaeger_thrift", "loki"}  # exporters gone from current Collector releases
    assert not {e.split("/")[0] for e in defined["exporters"]} & removed


def test_collector_settings_the_stack_relies_on():
    cfg = _yaml("deploy/otel-collector/config.yaml")
    for proto, port in (("grpc", 4317), ("http", 4318)):
        assert cfg["receivers"]["otlp"]["protocols"][proto]["endpoint"] == f"0.0.0.0:{port}"
    prom = cfg["exporters"]["prometheus"]
    assert prom["enable_open_metrics"] is True, "exemplars need OpenMetrics"
    assert prom["resource_to_telemetry_conversion"]["enabled"] is True, "verl_project/verl_experiment labels"
    assert cfg["exporters"]["otlp/jaeger"]["endpoint"] == "jaeger:4317"
    assert cfg["exporters"]["otlp/jaeger"]["tls"]["insecure"] is True
    assert "traces" in cfg["service"]["pipelines"] and "otlp/jaeger" in cfg["service"]["pipelines"]["traces"]["exporters"]
    buckets = cfg["connectors"]["spanmetrics"]["histogram"]["explicit"]["buckets"]
    seconds = [_duration_s(b) for b in buckets]
    assert seconds == sorted(seconds) and seconds[0] <= 1 and seconds[-1] >= 3600, "seconds to hours"
    reader = cfg["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
    assert reader["host"] == "0.0.0.0", "Prometheus must reach the Collector's own metrics"
    ports = {_port(t) for j in _yaml("deploy/prometheus/prometheus.yml")["scrape_configs"]
             for c in j.get("static_configs", []) for t in c["targets"] if t.startswith("otel-collector:")}
    assert ports == {_port(prom["endpoint"]), reader["port"]}


def _duration_s(text: str) -> float:
    return sum(float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u] for n, u in re.findall(r"([\d.]+)(ms|s|m|h)", text))


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


# -- Jaeger v2 ----------------------------------------------------------------------------------------------------
def test_jaeger_config_is_consistent():
    cfg = _yaml("deploy/jaeger/config.yaml")
    service = cfg["service"]
    assert set(service["extensions"]) == set(cfg["extensions"])
    pipe = service["pipelines"]["traces"]
    for kind in ("receivers", "processors", "exporters"):
        assert set(pipe[kind]) <= set(cfg[kind]), kind
    backends = set(cfg["extensions"]["jaeger_storage"]["backends"])
    assert cfg["extensions"]["jaeger_query"]["storage"]["traces"] in backends
    assert cfg["exporters"]["jaeger_storage_exporter"]["trace_storage"] in backends
    assert cfg["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] == "0.0.0.0:4317", "the Collector sends here"
    assert _port(cfg["extensions"]["jaeger_query"]["http"]["endpoint"]) == 16686
    health = _port(cfg["extensions"]["healthcheckv2"]["http"]["endpoint"])
    assert f":{health}/" in " ".join(_compose()["services"]["jaeger"]["healthcheck"]["test"])


# -- Prometheus -----------------------------------------------------------------------------------------------------
@needs_promtool
@pytest.mark.parametrize("config", ["prometheus.yml", "prometheus-pull.yml"])
def test_promtool_check_config(config):
    proc = subprocess.run(["promtool", "check", "config", "--syntax-only", str(PROM_DIR / config)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_promtool_check_config_with_the_rules_it_loads(tmp_path):
    """Without --syntax-only: the rule files the server config names (as mounted) are loaded and checked too."""
    cfg = _yaml("deploy/prometheus/prometheus.yml")
    assert cfg["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    cfg["rule_files"] = [str(PROM_DIR / "rules" / "*.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


def test_prometheus_scrapes_the_services_compose_defines():
    services = _compose()["services"]
    for job in _yaml("deploy/prometheus/prometheus.yml")["scrape_configs"]:
        for target in (t for c in job.get("static_configs", []) for t in c["targets"]):
            assert target.split(":")[0] in services, f"job {job['job_name']}: no service {target}"
    pull = _yaml("deploy/prometheus/prometheus-pull.yml")
    sd_file = pull["scrape_configs"][0]["file_sd_configs"][0]["files"][0]
    assert Path(sd_file).name == sc.PROM_TARGETS_FILE and str(Path(sd_file).parent) in _mounts(
        services["prometheus-pull"])
    assert pull["remote_write"][0]["url"] == "http://127.0.0.1:9090/api/v1/write"
    assert "${VERL_OTEL_BIND:-127.0.0.1}:9090:9090" in services["prometheus"]["ports"]
    assert pull["remote_write"][0]["send_exemplars"] is True


def test_pull_path_agent_remote_writes_the_runs_metrics(prom_factory, tmp_path):  # noqa: F811 (pytest fixture)
    """prometheus-pull.yml in a real Prometheus agent: it discovers a process through the run's file_sd file
    (the format verl-otel writes) and remote-writes its samples into a server started like the compose one."""
    server = prom_factory(config={"global": {"scrape_interval": "1m"}, "scrape_configs": []},
                          args=["--web.enable-remote-write-receiver"])
    metrics = f"# TYPE {sc.TRAINING_STEP.name} gauge\n{sc.TRAINING_STEP.name} 7\n"
    with MetricsEndpoint(metrics) as endpoint:
        sd_file = tmp_path / sc.PROM_TARGETS_FILE
        sd_file.write_text(json.dumps([{"targets": [endpoint.address], "labels": {
            sc.LABEL_PROJECT: "p", sc.LABEL_EXPERIMENT: "e", sc.LABEL_PROCESS_ROLE: sc.ROLE_TRAINER,
            "__verl_otel_pid": "1"}}]))
        cfg = _yaml("deploy/prometheus/prometheus-pull.yml")
        cfg["global"]["scrape_interval"] = "1s"
        cfg["scrape_configs"][0]["file_sd_configs"][0]["files"] = [str(sd_file)]
        cfg["remote_write"][0]["url"] = f"{server.url}/api/v1/write"
        cfg["remote_write"][0]["queue_config"] = {"batch_send_deadline": "1s"}
        prom_factory(config=cfg, agent=True)
        rows = server.wait_for(f'{sc.TRAINING_STEP.name}{{job="verl"}}')
    labels = rows[0]["metric"]
    assert rows[0]["value"][1] == "7"
    assert labels[sc.LABEL_PROJECT] == "p" and labels[sc.LABEL_EXPERIMENT] == "e"
    assert labels[sc.LABEL_PROCESS_ROLE] == sc.ROLE_TRAINER and "__verl_otel_pid" not in labels


# -- Grafana provisioning -------------------------------------------------------------------------------------------
def _datasources() -> dict[str, dict]:
    doc = _yaml("deploy/grafana/provisioning/datasources/datasources.yml")
    return {d["uid"]: d for d in doc["datasources"]}


def test_grafana_datasources_link_exemplars_and_traces():
    uids = _datasources()
    assert {PROM_UID, JAEGER_UID} <= set(uids)
    prom, jaeger = uids[PROM_UID], uids[JAEGER_UID]
    assert prom["type"] == "prometheus" and jaeger["type"] == "jaeger"
    dest = prom["jsonData"]["exemplarTraceIdDestinations"][0]
    assert dest["datasourceUid"] == JAEGER_UID and dest["name"] == "trace_id", "exemplar label the exporters write"
    assert jaeger["jsonData"]["tracesToMetrics"]["datasourceUid"] == PROM_UID
    services = _compose()["services"]
    for ds, service, port in ((prom, "prometheus", 9090), (jaeger, "jaeger", 16686)):
        assert ds["url"] == f"http://{service}:{port}" and service in services


def test_grafana_dashboards_resolve_to_provisioned_datasources():
    uids = _datasources()
    prov = _yaml("deploy/grafana/provisioning/dashboards/dashboards.yml")
    grafana = _compose()["services"]["grafana"]
    assert _mounts(grafana)[prov["providers"][0]["options"]["path"]] == "./grafana"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(prov["providers"][0]["options"]["path"] + "/")
    assert (ROOT / "grafana" / Path(home).name).exists()
    for d in panels.DASHBOARDS:
        doc = json.loads((ROOT / "grafana" / f"{d.uid}.json").read_text())
        current = {v["name"]: v["current"]["value"] for v in doc["templating"]["list"] if v["type"] == "datasource"}

        def resolve(ref: dict) -> str:
            m = re.fullmatch(r"\$\{(\w+)\}", ref["uid"])
            return current[m[1]] if m else ref["uid"]

        refs = [v["datasource"] for v in doc["templating"]["list"] if "datasource" in v]
        refs += [p["datasource"] for p in doc["panels"]] + [t["datasource"] for p in doc["panels"]
                                                             for t in p.get("targets", [])]
        for ref in refs:
            uid = resolve(ref)
            assert uid in uids and uids[uid]["type"] == ref["type"], (d.uid, ref)
