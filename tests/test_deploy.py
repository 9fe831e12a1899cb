"""The stack's files, checked with the strongest real tools here (there is no Docker engine, Jaeger, Grafana or
Collector binary on these machines): the compose spec's JSON schema, promtool, real Prometheus servers for the
pull path, and the structure the Collector, Jaeger and Grafana configurations require (cross-checked with
each other: ports, service names, datasource uids)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jsonschema
import pytest
import yaml

from helpers.otlp_receiver import free_port
from helpers.prom import MetricsEndpoint, available

from verl_otel import semconv as sc
from verl_otel.dashboards import panels
from verl_otel.dashboards.grafana import JAEGER_UID, PROM_UID

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


OTLP_BIND = "${VERL_OTEL_OTLP_BIND:-127.0.0.1}"
UI_BIND = "${VERL_OTEL_UI_BIND:-127.0.0.1}"


def test_compose_services_are_pinned_local_and_health_checked():
    doc = _compose()
    for name, svc in doc["services"].items():
        image = svc["image"]
        assert re.search(r":[\w.-]*\d[\w.-]*$", image) and not image.endswith(":latest"), f"{name}: pin {image}"
        for port in svc.get("ports", []):
            assert port.startswith((f"{OTLP_BIND}:", f"{UI_BIND}:")), f"{name} publishes {port} beyond loopback"
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
    assert version("alertmanager") >= (0, 26, 0), "the webhook receiver's url_file needs Alertmanager 0.26"
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


def test_only_otlp_ingress_has_its_own_bind_and_both_default_to_loopback():
    """Trainers on other hosts need the OTLP ports only: VERL_OTEL_OTLP_BIND opens those, every UI and API
    (Grafana, Prometheus with its lifecycle and remote-write endpoints, Jaeger, Alertmanager, DCGM) stays on
    VERL_OTEL_UI_BIND."""
    services = _compose()["services"]
    otlp = {(name, p.split(":")[-1]) for name, svc in services.items() for p in svc.get("ports", [])
            if p.startswith(f"{OTLP_BIND}:")}
    assert otlp == {("otel-collector", "4317"), ("otel-collector", "4318")}
    ui = {(name, p.split(":")[-1]) for name, svc in services.items() for p in svc.get("ports", [])
          if p.startswith(f"{UI_BIND}:")}
    assert {("grafana", "3000"), ("prometheus", "9090"), ("jaeger", "16686"), ("alertmanager", "9093")} <= ui
    assert _default(OTLP_BIND) == _default(UI_BIND) == "127.0.0.1"
    assert "VERL_OTEL_BIND" not in (ROOT / "docker-compose.yml").read_text(), "the old all-ports bind is gone"


# -- Grafana's guard: no exposure with the default password -------------------------------------------------------
GUARD = ROOT / "deploy/grafana/guard.sh"


def test_grafana_starts_through_the_guard_with_the_ui_bind():
    grafana = _compose()["services"]["grafana"]
    script = grafana["entrypoint"][-1]
    assert grafana["entrypoint"][0] == "/bin/sh" and _mounts(grafana)[script] == "./deploy/grafana/guard.sh"
    env = grafana["environment"]
    assert env["VERL_OTEL_UI_BIND"] == UI_BIND and f"{UI_BIND}:3000:3000" in grafana["ports"], \
        "the guard must see the address Grafana's port is published on"
    default = re.search(r":-([^}]*)\}", env["GF_SECURITY_ADMIN_PASSWORD"])[1]
    assert f'default_password="{default}"' in GUARD.read_text(), "the guard knows compose's default password"


def _guard(tmp_path: Path, bind: str | None, password: str | None,
           cli_exit: int = 0) -> tuple[subprocess.CompletedProcess, list[str]]:
    """guard.sh under /bin/sh with stand-ins for the image's /run.sh and `grafana` CLI that record their calls."""
    calls = tmp_path / "calls"
    for name, code in (("run.sh", 0), ("grafana", cli_exit)):
        stub = tmp_path / "bin" / name
        stub.parent.mkdir(exist_ok=True)
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\nexit {code}\n')
        stub.chmod(0o755)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "VERL_OTEL_GRAFANA_RUN": str(tmp_path / "bin" / "run.sh"),
           "GF_PATHS_HOME": "/usr/share/grafana", "GF_PATHS_CONFIG": "/etc/grafana/grafana.ini",
           "GF_PATHS_DATA": "/var/lib/grafana"}
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
    assert calls == ["grafana cli --homepath /usr/share/grafana --config /etc/grafana/grafana.ini --configOverrides "
                     "cfg:default.paths.data=/var/lib/grafana admin reset-admin-password s3cret pass",
                     "run.sh --extra"]


def test_grafana_guard_stops_when_the_password_reset_fails(tmp_path):
    proc, calls = _guard(tmp_path, "0.0.0.0", "s3cret", cli_exit=3)
    assert proc.returncode == 3 and [c.split()[0] for c in calls] == ["grafana"], "fail closed: no Grafana"


# -- limits and persistence -----------------------------------------------------------------------------------
def _size_bytes(text: str) -> int:
    n, unit = re.fullmatch(r"(\d+)([bkmg]?)", text.lower()).groups()
    return int(n) * {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30}[unit]


def test_collector_memory_limiter_works_within_the_containers_limit():
    """limit_percentage is a share of the cgroup's limit: without a container limit it is a share of the host's RAM
    (never reached on a large GPU host)."""
    svc = _compose()["services"]["otel-collector"]
    limit = _size_bytes(_default(svc["deploy"]["resources"]["limits"]["memory"]))
    assert 256 * 2**20 <= limit <= 8 * 2**30
    ml = _yaml("deploy/otel-collector/config.yaml")["processors"]["memory_limiter"]
    assert "limit_mib" not in ml and "spike_limit_mib" not in ml, "a fixed MiB would ignore the container's limit"
    assert 0 < ml["spike_limit_percentage"] < ml["limit_percentage"] <= 90, "headroom for the Go runtime"


def test_jaeger_keeps_traces_on_a_volume_as_long_as_prometheus_keeps_exemplars():
    cfg = _yaml("deploy/jaeger/config.yaml")
    store = cfg["extensions"]["jaeger_storage"]["backends"][cfg["extensions"]["jaeger_query"]["storage"]["traces"]]
    badger = store["badger"]
    assert badger["ephemeral"] is False
    jaeger = _compose()["services"]["jaeger"]
    volumes = {dst: src for dst, src in _mounts(jaeger).items() if not src.startswith("./")}
    for path in badger["directories"].values():
        assert any(path.startswith(dst.rstrip("/") + "/") for dst in volumes), f"{path} is not on a volume"
    assert set(volumes.values()) <= set(_compose()["volumes"])
    retention = next(a.split("=", 1)[1] for a in _compose()["services"]["prometheus"]["command"]
                     if a.startswith("--storage.tsdb.retention.time="))
    assert _duration_s(badger["ttl"]["spans"]) == _duration_s(retention), (badger["ttl"], retention)


# -- Alertmanager --------------------------------------------------------------------------------------------------
AM_CONFIG = ROOT / "deploy/alertmanager/alertmanager.yml"


def test_prometheus_sends_alerts_to_the_compose_alertmanager():
    services = _compose()["services"]
    am = services["alertmanager"]
    config = next(a.split("=", 1)[1] for a in am["command"] if a.startswith("--config.file="))
    assert _mounts(am)[config] == "./deploy/alertmanager/alertmanager.yml"
    targets = [t for a in _yaml("deploy/prometheus/prometheus.yml")["alerting"]["alertmanagers"]
               for c in a["static_configs"] for t in c["targets"]]
    assert targets == ["alertmanager:9093"] and f"{UI_BIND}:9093:9093" in am["ports"]
    receivers = yaml.safe_load(AM_CONFIG.read_text())["receivers"]
    url_files = [w["url_file"] for r in receivers for w in r.get("webhook_configs", [])]
    assert url_files and all(Path(f).parent.as_posix() in _mounts(am) for f in url_files), \
        "the receiver's URL file lies in a mounted folder"


def _amtool_version() -> tuple[int, ...]:
    out = subprocess.run(["amtool", "--version"], capture_output=True, text=True).stdout
    return tuple(int(x) for x in re.search(r"version (\d+)\.(\d+)\.(\d+)", out).groups())


def _alertmanager_config_for(webhook_url: str | None, tmp_path: Path) -> Path:
    """The committed config; url_file (Alertmanager >= 0.26, newer than Debian's 0.25 amtool here) becomes the
    equivalent inline url when the local tools predate it (the only key that differs)."""
    doc = yaml.safe_load(AM_CONFIG.read_text())
    for receiver in doc["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            if webhook_url is not None:
                url_file = tmp_path / "webhook_url"
                url_file.write_text(webhook_url + "\n")
                hook["url_file"] = str(url_file)
            if _amtool_version() < (0, 26, 0):
                hook["url"] = webhook_url or "http://127.0.0.1:1/unset"
                del hook["url_file"]
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool not installed (`make prometheus` installs it)")
def test_amtool_checks_the_alertmanager_config(tmp_path):
    proc = subprocess.run(["amtool", "check-config", str(_alertmanager_config_for(None, tmp_path))],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


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
    assert not cfg.get("connectors"), "no panel reads span-derived metrics (spanmetrics was removed)"
    reader = cfg["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
    assert reader["host"] == "0.0.0.0", "Prometheus must reach the Collector's own metrics"
    ports = {_port(t) for j in _yaml("deploy/prometheus/prometheus.yml")["scrape_configs"]
             for c in j.get("static_configs", []) for t in c["targets"] if t.startswith("otel-collector:")}
    assert ports == {_port(prom["endpoint"]), reader["port"]}


def _duration_s(text: str) -> float:
    return sum(float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[u]
               for n, u in re.findall(r"([\d.]+)(ms|s|m|h|d)", text))


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
    assert f"{UI_BIND}:9090:9090" in services["prometheus"]["ports"]
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


class _Webhook:
    """An HTTP receiver on 127.0.0.1 recording the JSON bodies POSTed to it (Alertmanager's webhook)."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.skipif(shutil.which("prometheus-alertmanager") is None,
                    reason="Alertmanager not installed (`make prometheus` installs Debian's)")
def test_a_firing_rule_reaches_the_receiver(prom_factory, tmp_path):  # noqa: F811 (pytest fixture)
    """prometheus.yml's `alerting:` and alertmanager.yml's route and receiver, in a real Prometheus and a real
    Alertmanager: a firing rule arrives as a webhook POST (the route's waits shortened, nothing else changed)."""
    hook = _Webhook()
    am_config = _alertmanager_config_for(hook.url, tmp_path)
    doc = yaml.safe_load(am_config.read_text())
    doc["route"]["group_wait"] = "1s"
    am_config.write_text(yaml.safe_dump(doc))
    am_port = free_port()
    log = open(tmp_path / "alertmanager.log", "wb")
    am = subprocess.Popen(["prometheus-alertmanager", f"--config.file={am_config}",
                           f"--storage.path={tmp_path / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
                           "--cluster.listen-address="], stdout=log, stderr=subprocess.STDOUT)
    try:
        rules = tmp_path / "rules.yml"
        rules.write_text(yaml.safe_dump({"groups": [{"name": "check", "rules": [{
            "alert": "VerlDeliveryCheck", "expr": "vector(1)",
            "labels": {"severity": "warning", sc.LABEL_PROJECT: "p", sc.LABEL_EXPERIMENT: "e"},
            "annotations": {"summary": "delivery check"}}]}]}))
        cfg = _yaml("deploy/prometheus/prometheus.yml")
        cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] = [f"127.0.0.1:{am_port}"]
        # resend-delay: an alert sent before the Alertmanager was discovered would wait a minute otherwise
        prom_factory(config={"global": {"evaluation_interval": "1s"}, "rule_files": [str(rules)],
                             "alerting": cfg["alerting"], "scrape_configs": []}, args=["--rules.alert.resend-delay=1s"])
        deadline = time.monotonic() + 60
        while not hook.bodies and time.monotonic() < deadline and am.poll() is None:
            time.sleep(0.5)
    finally:
        am.terminate()
        am.wait(10)
        log.close()
        hook.close()
    assert hook.bodies, (tmp_path / "alertmanager.log").read_text()[-2000:]
    body = hook.bodies[0]
    assert body["receiver"] == doc["route"]["receiver"] and body["status"] == "firing"
    assert body["alerts"][0]["labels"]["alertname"] == "VerlDeliveryCheck"
    assert body["groupLabels"] == {"alertname": "VerlDeliveryCheck", sc.LABEL_PROJECT: "p", sc.LABEL_EXPERIMENT: "e"}
