"""The trace side of the stack: the Collector's pipelines and settings (cross-checked with compose and
Prometheus' scrape targets), its memory limit, the push path's series identity with our real resource, and
Jaeger v2's configuration and retention, read from the files (the real binaries run them in
tests/test_stack_versions.py and tests/test_e2e_real_stack.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from helpers.deploy import compose, env_default, mounts, repo_yaml

from verl_otel import semconv as sc

# -- the Collector ----------------------------------------------------------------------------------------------
COLLECTOR_CONFIGS = ("deploy/otel-collector/config.yaml", "deploy/otel-collector/agent.yaml")


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS)
def test_collector_pipelines_use_only_defined_current_components(path):
    cfg = repo_yaml(path)
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
    for conn in defined["connectors"]:  # a connector is an exporter of one pipeline and a receiver of another
        assert conn in used_as["exporters"] and conn in used_as["receivers"], conn
    for kind in ("receivers", "processors", "exporters"):
        assert defined[kind] <= used_as[kind], f"defined but unused {kind}: {defined[kind] - used_as[kind]}"
    assert set(cfg["service"]["extensions"]) == set(cfg["extensions"])
    removed = {"jaeger", "logging", "jaeger_thrift", "loki"}  # exporters gone from current Collector releases
    assert not {e.split("/")[0] for e in defined["exporters"]} & removed


def test_collector_settings_the_stack_relies_on():
    cfg = repo_yaml("deploy/otel-collector/config.yaml")
    for proto, port in (("grpc", 4317), ("http", 4318)):
        assert cfg["receivers"]["otlp"]["protocols"][proto]["endpoint"] == f"0.0.0.0:{port}"
    prom = cfg["exporters"]["prometheus"]
    assert prom["enable_open_metrics"] is True, "exemplars need OpenMetrics"
    assert prom["resource_to_telemetry_conversion"]["enabled"] is True, "verl_project/verl_experiment labels"
    assert cfg["exporters"]["otlp/jaeger"]["endpoint"] == "jaeger:4317"
    assert cfg["exporters"]["otlp/jaeger"]["tls"]["insecure"] is True
    assert (
        "traces" in cfg["service"]["pipelines"] and "otlp/jaeger" in cfg["service"]["pipelines"]["traces"]["exporters"]
    )
    assert not cfg.get("connectors"), "no panel reads span-derived metrics (spanmetrics was removed)"
    reader = cfg["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
    assert reader["host"] == "0.0.0.0", "Prometheus must reach the Collector's own metrics"
    ports = {
        _port(t)
        for j in repo_yaml("deploy/prometheus/prometheus.yml")["scrape_configs"]
        for c in j.get("static_configs", [])
        for t in c["targets"]
        if t.startswith("otel-collector:")
    }
    assert ports == {_port(prom["endpoint"]), reader["port"]}


def _size_bytes(text: str) -> int:
    n, unit = re.fullmatch(r"(\d+)([bkmg]?)", text.lower()).groups()
    return int(n) * {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30}[unit]


def test_collector_memory_limiter_works_within_the_containers_limit():
    """limit_percentage is a share of the cgroup's limit: without a container limit it is a share of the host's RAM
    (never reached on a large GPU host)."""
    svc = compose()["services"]["otel-collector"]
    limit = _size_bytes(env_default(svc["deploy"]["resources"]["limits"]["memory"]))
    assert 256 * 2**20 <= limit <= 8 * 2**30
    ml = repo_yaml("deploy/otel-collector/config.yaml")["processors"]["memory_limiter"]
    assert "limit_mib" not in ml and "spike_limit_mib" not in ml, "a fixed MiB would ignore the container's limit"
    assert 0 < ml["spike_limit_percentage"] < ml["limit_percentage"] <= 90, "headroom for the Go runtime"


_RESOURCE_OF_PROCESS = (
    "import json, sys; from verl_otel.export.providers import resource; "
    "print(json.dumps(dict(resource(sys.argv[1], None, {'verl.project': 'p'}).attributes)))"
)


def _series_labels(attrs: dict, deleted: set[str]) -> dict[str, str]:
    """The labels the Collector's prometheus exporter gives a series of a process with resource ``attrs``, after
    the metrics pipeline's resource processor deleted ``deleted`` (resource_to_telemetry_conversion copies every
    resource attribute; job and instance come from service.name and service.instance.id)."""
    kept = {k: str(v) for k, v in attrs.items() if k not in deleted}
    labels = {re.sub(r"[^a-zA-Z0-9_]", "_", k): v for k, v in kept.items()}
    labels["job"], labels["instance"] = kept["service.name"], kept.get("service.instance.id", "")
    return labels


def test_push_path_series_identity_is_the_process_not_its_pid_or_sdk(tmp_path):
    """Each process' series are told apart by a readable `instance` (service.instance.id), not by pid or SDK labels:
    our real resource of two processes of one role, through the metrics pipeline's resource processor."""
    cfg = repo_yaml("deploy/otel-collector/config.yaml")
    pipes = cfg["service"]["pipelines"]
    assert "resource/series_labels" in pipes["metrics"]["processors"]
    assert "resource/series_labels" not in pipes["traces"]["processors"], "spans keep the pid"
    actions = cfg["processors"]["resource/series_labels"]["attributes"]
    assert all(a["action"] == "delete" and set(a) == {"key", "action"} for a in actions), actions
    deleted = {a["key"] for a in actions}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "VERL_OTEL_"))}
    env["OTEL_RESOURCE_ATTRIBUTES"] = "service.instance.id=shared-by-all,cluster=c1"
    procs = [
        subprocess.run(
            [sys.executable, "-c", _RESOURCE_OF_PROCESS, "trainer"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        for _ in range(2)
    ]
    assert all(p.returncode == 0 for p in procs), [p.stderr for p in procs]
    first, second = (json.loads(p.stdout) for p in procs)
    assert {"process.pid", "telemetry.sdk.version"} <= set(first), "the resource has them (spans keep them)"
    a, b = _series_labels(first, deleted), _series_labels(second, deleted)
    assert not [k for k in a if k.startswith(("process_", "telemetry_"))], a
    assert a["instance"] != b["instance"], "two processes: two instances (else they overwrite each other's series)"
    assert re.fullmatch(rf"[^/]+/trainer/{first['process.pid']}", a["instance"]), a["instance"]
    assert {k: v for k, v in a.items() if "instance" not in k} == {k: v for k, v in b.items() if "instance" not in k}
    assert (
        a["verl_project"] == "p" and a["verl_process_role"] == "trainer" and a["cluster"] == "c1" and a["job"] == "verl"
    )


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


# -- Jaeger v2 ----------------------------------------------------------------------------------------------------
def test_jaeger_config_is_consistent():
    cfg = repo_yaml("deploy/jaeger/config.yaml")
    service = cfg["service"]
    assert set(service["extensions"]) == set(cfg["extensions"])
    pipe = service["pipelines"]["traces"]
    for kind in ("receivers", "processors", "exporters"):
        assert set(pipe.get(kind, [])) <= set(cfg.get(kind) or {}), kind
    backends = set(cfg["extensions"]["jaeger_storage"]["backends"])
    assert cfg["extensions"]["jaeger_query"]["storage"]["traces"] in backends
    assert cfg["exporters"]["jaeger_storage_exporter"]["trace_storage"] in backends
    assert cfg["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] == "0.0.0.0:4317", "the Collector sends here"
    assert _port(cfg["extensions"]["jaeger_query"]["http"]["endpoint"]) == 16686
    health = _port(cfg["extensions"]["healthcheckv2"]["http"]["endpoint"])
    assert f":{health}/" in " ".join(compose()["services"]["jaeger"]["healthcheck"]["test"])


def _duration_s(text: str) -> float:
    return sum(
        float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[u]
        for n, u in re.findall(r"([\d.]+)(ms|s|m|h|d)", text)
    )


def test_jaeger_keeps_traces_on_a_volume_as_long_as_prometheus_keeps_exemplars():
    cfg = repo_yaml("deploy/jaeger/config.yaml")
    store = cfg["extensions"]["jaeger_storage"]["backends"][cfg["extensions"]["jaeger_query"]["storage"]["traces"]]
    badger = store["badger"]
    assert badger["ephemeral"] is False
    jaeger = compose()["services"]["jaeger"]
    volumes = {dst: src for dst, src in mounts(jaeger).items() if not src.startswith("./")}
    for path in badger["directories"].values():
        assert any(path.startswith(dst.rstrip("/") + "/") for dst in volumes), f"{path} is not on a volume"
    assert set(volumes.values()) <= set(compose()["volumes"])
    retention = next(
        a.split("=", 1)[1]
        for a in compose()["services"]["prometheus"]["command"]
        if a.startswith("--storage.tsdb.retention.time=")
    )
    assert _duration_s(badger["ttl"]["spans"]) == _duration_s(retention), (badger["ttl"], retention)


def test_collector_keeps_what_it_accepted_on_disk_until_jaeger_takes_it():
    """The otlp/jaeger queue is file_storage's (on compose's otelcol-queue volume) and never gives a batch up while
    Jaeger is down; tests/test_e2e_real_stack.py checks it on the real Collector through a Jaeger crash."""
    cfg = repo_yaml("deploy/otel-collector/config.yaml")
    exporter = cfg["exporters"]["otlp/jaeger"]
    assert exporter["sending_queue"]["storage"] == "file_storage" in cfg["service"]["extensions"]
    assert exporter["retry_on_failure"]["max_elapsed_time"] == 0
    directory = cfg["extensions"]["file_storage"]["directory"]
    svc = compose()["services"]
    assert mounts(svc["otel-collector"])[directory] == "otelcol-queue"
    # the one-shot service that hands the volume to the Collector's user runs first
    (init,) = [
        n for n, c in svc["otel-collector"]["depends_on"].items() if c["condition"] == "service_completed_successfully"
    ]
    assert mounts(svc[init])[directory] == "otelcol-queue" and "10001:10001" in svc[init]["entrypoint"]


@pytest.mark.parametrize("path", [*COLLECTOR_CONFIGS, "deploy/jaeger/config.yaml"])
def test_no_pipeline_holds_what_it_acknowledged_only_in_memory(path):
    """A `batch` processor holds what the receiver already acknowledged; a kill -9 loses it (issue 39): batching is
    the exporters' own, after their queue on disk. Every exporter that sends on (not the prometheus exporter's
    scrape endpoint, not Jaeger's own storage) queues on file_storage and retries until its target is back."""
    cfg = repo_yaml(path)
    for name, pipe in cfg["service"]["pipelines"].items():
        assert not [p for p in pipe.get("processors", []) if p.split("/")[0] == "batch"], (path, name)
    assert not [p for p in cfg.get("processors") or {} if p.split("/")[0] == "batch"], path
    storages = {n for n in cfg.get("extensions") or {} if n.split("/")[0] == "file_storage"}
    for name, exporter in cfg["exporters"].items():
        if name.split("/")[0] not in ("otlp", "otlp_grpc", "otlphttp"):
            continue
        queue = exporter["sending_queue"]
        assert queue["storage"] in storages & set(cfg["service"]["extensions"]), (path, name)
        assert queue.get("enabled", True) and not queue.get("wait_for_result"), (path, name)
        assert exporter["retry_on_failure"]["max_elapsed_time"] == 0, (path, name)


def test_the_agent_listens_where_the_forwarded_loopback_endpoint_points_and_sends_to_the_gateway():
    """agent.yaml: on each node's loopback at the gateway's OTLP ports (so the driver's
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317, forwarded to every node, reaches the node's agent), both
    signals to the gateway named by VERL_OTEL_GATEWAY_ENDPOINT, its queue in VERL_OTEL_AGENT_QUEUE_DIR."""
    agent, gateway = repo_yaml("deploy/otel-collector/agent.yaml"), repo_yaml("deploy/otel-collector/config.yaml")
    for proto in ("grpc", "http"):
        ours = agent["receivers"]["otlp"]["protocols"][proto]["endpoint"]
        assert ours.startswith(f"${{env:{sc.ENV_AGENT_BIND}:-127.0.0.1}}:"), ours
        assert _port(ours) == _port(gateway["receivers"]["otlp"]["protocols"][proto]["endpoint"])
    (exporter,) = agent["exporters"]
    assert agent["exporters"][exporter]["endpoint"] == f"${{env:{sc.ENV_GATEWAY_ENDPOINT}}}"
    pipes = agent["service"]["pipelines"]
    assert set(pipes) == {"traces", "metrics"} and all(p["exporters"] == [exporter] for p in pipes.values())
    assert agent["extensions"]["file_storage"]["directory"].startswith(f"${{env:{sc.ENV_AGENT_QUEUE_DIR}:-/")
    ml = agent["processors"]["memory_limiter"]
    assert 0 < ml["spike_limit_mib"] < ml["limit_mib"] <= 2048, "a fixed, small ceiling on a training node"
