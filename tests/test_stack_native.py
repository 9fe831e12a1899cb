"""`verl-otel stack up --native` / `stack down`: the real binaries on free ports, the deploy files with only
addresses and paths overridden, clear messages instead of tracebacks."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from helpers.procs import ROOT
from helpers.real_stack import go_binaries, system_binaries

from verl_otel.native import Ports, configs, procs


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "verl_otel.cli.main", "stack", *args], capture_output=True, text=True, timeout=timeout
    )


def test_the_collectors_reader_override_changes_only_its_address():
    deploy = yaml.safe_load((ROOT / "deploy/otel-collector/config.yaml").read_text())
    (reader,) = deploy["service"]["telemetry"]["metrics"]["readers"]
    prom = dict(reader["pull"]["exporter"]["prometheus"])
    assert {k: v for k, v in prom.items() if k not in ("host", "port")} == configs.COLLECTOR_READER


def test_up_without_native_points_to_docker():
    proc = _cli("up")
    assert proc.returncode == 2 and "docker compose up" in proc.stderr and "Traceback" not in proc.stderr


def test_a_missing_binary_is_named_with_the_way_to_get_it(tmp_path):
    proc = _cli("up", "--native", "--state", str(tmp_path), "--jaeger", str(tmp_path / "nope"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"jaeger: {tmp_path / 'nope'} is not a file" in proc.stderr
    # nowhere (no .stack-bin under the root, not on PATH): the message says how to get it
    with pytest.raises(configs.ConfigError, match="`make stack-bin` builds it"):
        configs.find_binary("collector", None, tmp_path)


def test_down_without_a_stack_says_so(tmp_path):
    proc = _cli("down", "--state", str(tmp_path))
    assert proc.returncode == 0 and "no stack runs" in proc.stdout


def test_up_and_down_run_every_part_on_the_given_ports(tmp_path):
    bins = {**go_binaries(), **system_binaries()}
    ports = Ports.free()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    port_args = [a for name, port in ports.items() for a in ("--port", f"{name}={port}")]
    bin_args = [a for name, path in bins.items() for a in (f"--{name}", str(path))]
    state = tmp_path / "state"
    try:
        busy = _cli(
            "up",
            "--native",
            "--state",
            str(state),
            *port_args,
            *bin_args,
            "--port",
            f"prometheus={taken.getsockname()[1]}",
        )
        assert busy.returncode == 1 and "ports in use: prometheus" in busy.stderr, busy.stderr
        proc = _cli("up", "--native", "--state", str(state), *port_args, *bin_args)
        assert proc.returncode == 0, proc.stderr
        running = procs.running(state)
        assert set(running) == {"collector", "jaeger", "prometheus", "alertmanager"}
        assert f"http://127.0.0.1:{ports.otlp_grpc}" in proc.stdout
        for url in (
            f"http://127.0.0.1:{ports.jaeger_ui}/api/v3/services",
            f"http://127.0.0.1:{ports.prometheus}/-/ready",
            f"http://127.0.0.1:{ports.alertmanager}/-/ready",
            f"http://127.0.0.1:{ports.collector_health}/",
        ):
            with urllib.request.urlopen(url, timeout=10) as r:
                assert r.status == 200, url
        again = _cli("up", "--native", "--state", str(state), *port_args, *bin_args)
        assert again.returncode == 1 and "already runs" in again.stderr
        # Prometheus reads deploy/prometheus/prometheus.yml with only the addresses and the rules path replaced
        derived = (state / "prometheus.yml").read_text()
        assert "otel-collector:" not in derived and f"127.0.0.1:{ports.collector_metrics}" in derived
    finally:
        taken.close()
        down = _cli("down", "--state", str(state))
    assert down.returncode == 0 and not procs.running(state), down.stdout
    assert all(not procs.alive(pid) for pid in running.values())


def test_native_prometheus_takes_composes_flags(tmp_path):
    """Besides its paths and listen address, `stack up --native` runs Prometheus with compose's flags."""
    from helpers.deploy import compose

    from verl_otel.native.ports import Binds

    flags = compose()["services"]["prometheus"]["command"]
    own = ("--config.file=", "--storage.tsdb.path=", "--web.listen-address=")
    part = configs.prometheus(tmp_path / "prometheus", ROOT, tmp_path, Ports(), Binds(), None)
    assert {f for f in flags if not f.startswith(own)} <= set(part.argv), part.argv


def test_free_ports_stay_out_of_the_ephemeral_range_so_a_restart_finds_them_free():
    """A stack the tests restart (the outage run) must get its ports back: bind(0) ports come from the kernel's
    ephemeral range, where an outgoing connection may take one as soon as its server stops."""
    low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    picked = Ports.free().items()
    ports = [p for _, p in picked]
    assert len(set(ports)) == len(ports) == len(Ports().items())
    assert not [p for p in ports if low <= p <= high], (low, high, picked)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free now


def test_the_agent_runs_agent_yaml_with_only_its_addresses_set(tmp_path):
    """verl_otel.native.agent: deploy/otel-collector/agent.yaml as users run it (the gateway and the queue folder in
    its variables), every --set key one the file has (a renamed key fails here, not in a real run)."""
    from verl_otel import semconv as sc
    from verl_otel.native.agent import AgentPorts, agent_part

    part = agent_part(Path("/bin/otelcol"), ROOT, tmp_path, "head-node:4317", "10.1.0.2", AgentPorts(1, 2, 3, 4))
    assert part.argv[:2] == ["/bin/otelcol", f"--config={ROOT / 'deploy/otel-collector/agent.yaml'}"]
    queue = str(tmp_path / "agent-queue")
    assert part.env == {sc.ENV_GATEWAY_ENDPOINT: "head-node:4317", sc.ENV_AGENT_QUEUE_DIR: queue}
    assert part.health_url == "http://10.1.0.2:3/"
    deploy = yaml.safe_load((ROOT / "deploy/otel-collector/agent.yaml").read_text())
    sets = dict(a.removeprefix("--set=").split("=", 1) for a in part.argv[2:])
    for key in sets:
        node = deploy
        for part_of_key in key.split("."):
            assert isinstance(node, dict) and part_of_key in node, key
            node = node[part_of_key]
    assert sets["receivers.otlp.protocols.grpc.endpoint"] == "10.1.0.2:1"
