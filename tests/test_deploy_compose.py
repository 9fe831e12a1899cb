"""docker-compose.yml, checked without a Docker engine (there is none on these machines): against the compose
spec's JSON schema, and for the settings the rest of the stack depends on: mounts and volumes, pinned and
health-checked images, loopback binds by default."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from helpers.deploy import OTLP_BIND, ROOT, UI_BIND, compose, env_default, mounts

SHARED = ROOT.parent / "shared"


# -- docker-compose.yml -----------------------------------------------------------------------------------------
def test_compose_validates_against_the_compose_spec():
    schema_path = SHARED / "schemas" / "compose-spec.json"
    if not schema_path.exists():
        pytest.skip(f"{schema_path} not present (shared/ sits beside the repository)")
    schema = json.loads(schema_path.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose()), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_compose_mounts_exist_and_volumes_are_declared():
    doc = compose()
    declared = set(doc.get("volumes", {}))
    for name, svc in doc["services"].items():
        for dst, src in mounts(svc).items():
            if src.startswith("./"):
                if src.rstrip("/") == "./verl-otel-data":  # the run writes it; compose creates it if missing
                    continue
                assert (ROOT / src).exists(), f"{name} mounts missing {src} at {dst}"
            else:
                assert src in declared, f"{name}: volume {src} not declared"


def test_compose_services_are_pinned_local_and_health_checked():
    doc = compose()
    one_shot = {
        d
        for s in doc["services"].values()
        if isinstance(s.get("depends_on"), dict)  # a list names services without conditions
        for d, c in s["depends_on"].items()
        if c.get("condition") == "service_completed_successfully"
    }
    for name, svc in doc["services"].items():
        image = svc["image"]
        if name in one_shot:  # runs once before another service (no health to check), never restarted
            assert svc.get("restart") == "no" and not svc.get("ports"), name
            assert re.search(r":[\w.-]*\d[\w.-]*$", image), f"{name}: pin {image}"
            continue
        assert re.search(r":[\w.-]*\d[\w.-]*$", image) and not image.endswith(":latest"), f"{name}: pin {image}"
        for port in svc.get("ports", []):
            assert port.startswith((f"{OTLP_BIND}:", f"{UI_BIND}:")), f"{name} publishes {port} beyond loopback"
        assert "healthcheck" in svc and svc["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
        if svc.get("network_mode") == "host":
            assert not svc.get("ports"), f"{name}: host networking publishes nothing"
            assert any("127.0.0.1:" in arg for arg in svc["command"]), f"{name}: listen on loopback on the host"
    assert {"gpu", "pull"} <= {p for s in doc["services"].values() for p in s.get("profiles", [])}


def test_compose_image_versions_and_settings_the_stack_depends_on():
    svc = compose()["services"]
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
    assert mounts(svc["prometheus"])[config] == "./deploy/prometheus/prometheus.yml"
    assert mounts(svc["prometheus"])["/etc/prometheus/rules"] == "./deploy/prometheus/rules"
    pull = svc["prometheus-pull"]
    assert pull["profiles"] == ["pull"] and "--enable-feature=agent" in pull["command"]
    assert mounts(pull)["/verl-otel-data"] == "./verl-otel-data"
    assert svc["dcgm-exporter"]["profiles"] == ["gpu"]
    assert "--config=/etc/otelcol-contrib/config.yaml" in svc["otel-collector"]["command"]
    assert mounts(svc["otel-collector"])["/etc/otelcol-contrib/config.yaml"] == "./deploy/otel-collector/config.yaml"
    assert mounts(svc["jaeger"])["/etc/jaeger/config.yaml"] == "./deploy/jaeger/config.yaml"


def test_only_otlp_ingress_has_its_own_bind_and_both_default_to_loopback():
    """Trainers on other hosts need the OTLP ports only: VERL_OTEL_OTLP_BIND opens those, every UI and API
    (Grafana, Prometheus with its lifecycle and remote-write endpoints, Jaeger, Alertmanager, DCGM) stays on
    VERL_OTEL_UI_BIND."""
    services = compose()["services"]
    otlp = {
        (name, p.split(":")[-1])
        for name, svc in services.items()
        for p in svc.get("ports", [])
        if p.startswith(f"{OTLP_BIND}:")
    }
    assert otlp == {("otel-collector", "4317"), ("otel-collector", "4318")}
    ui = {
        (name, p.split(":")[-1])
        for name, svc in services.items()
        for p in svc.get("ports", [])
        if p.startswith(f"{UI_BIND}:")
    }
    assert {("grafana", "3000"), ("prometheus", "9090"), ("jaeger", "16686"), ("alertmanager", "9093")} <= ui
    assert env_default(OTLP_BIND) == env_default(UI_BIND) == "127.0.0.1"
    assert "VERL_OTEL_BIND" not in (ROOT / "docker-compose.yml").read_text(), "the old all-ports bind is gone"
