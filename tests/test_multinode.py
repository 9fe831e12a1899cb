"""A two-node Ray cluster on this machine: two raylets (`ray start --head` and `ray start --address`, each with
a resource of its own, so an actor can be pinned to a node) and a job whose settings live only in the driver's
environment. Every process on both nodes is instrumented (the settings travel in Ray's runtime_env), pushes its
spans to an OTLP receiver (push path) and lists its /metrics in file_sd under an address another host can reach
(pull path, VERL_OTEL_PROMETHEUS_HOST=0.0.0.0), never 127.0.0.1."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from helpers.otlp_receiver import OtlpReceiver, free_port
from helpers.procs import clean_env

pytestmark = pytest.mark.verl  # real Ray, two raylets: a minute on 2 cores

RAY = str(Path(sys.executable).parent / "ray")


def _ray(*args: str, env: dict[str, str]) -> None:
    proc = subprocess.run([RAY, *args], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def _pids_of(temp: str) -> set[int]:
    """The processes of our cluster: those naming its temp dir on their command line, and their children."""
    mine = set()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and temp in (proc / "cmdline").read_bytes().decode(errors="replace"):
                mine.add(int(proc.name))
        except OSError:
            continue
    children = (
        subprocess.run(
            ["ps", "-o", "pid=", "--ppid", ",".join(map(str, mine))], capture_output=True, text=True
        ).stdout.split()
        if mine
        else []
    )
    return mine | {int(c) for c in children}


def _stop(temp: str) -> None:
    """Ends our raylets and their processes by pid (`ray stop` would end every Ray cluster on the machine)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _pids_of(temp):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        time.sleep(3)


@pytest.fixture
def two_nodes():
    """(address, env) of a head raylet with resource node_a and a second raylet with node_b."""
    temp = tempfile.mkdtemp(prefix="/tmp/rmn")  # Ray's socket paths must stay short
    # token auth is on by default where ~/.ray/auth_token exists, and the joining node does not send it
    env = clean_env(RAY_DEDUP_LOGS="0", RAY_AUTH_MODE="disabled")
    port = free_port()
    try:
        _ray(
            "start",
            "--head",
            f"--port={port}",
            f"--temp-dir={temp}",
            '--resources={"node_a": 1}',
            "--num-cpus=1",
            "--include-dashboard=false",
            "--disable-usage-stats",
            env=env,
        )
        _ray(
            "start",
            f"--address=127.0.0.1:{port}",
            f"--temp-dir={temp}",
            '--resources={"node_b": 1}',
            "--num-cpus=1",
            "--disable-usage-stats",
            env=env,
        )
        yield f"127.0.0.1:{port}", env
    finally:
        _stop(temp)
        shutil.rmtree(temp, ignore_errors=True)


def test_two_nodes_push_and_pull(two_nodes, tmp_path):
    address, env = two_nodes
    data = tmp_path / "data"
    with OtlpReceiver() as rx:
        job_env = {
            **env,
            "VERL_OTEL_ENABLED": "1",
            "OTEL_EXPORTER_OTLP_ENDPOINT": rx.grpc_endpoint,
            "VERL_OTEL_PROMETHEUS_PORT": "0",
            "VERL_OTEL_PROMETHEUS_HOST": "0.0.0.0",
            "VERL_OTEL_DIR": str(data),
            "OTEL_EXPORTER_OTLP_HEADERS": "x-team=rl",
        }
        driver = subprocess.Popen(
            [sys.executable, str(Path(__file__).parent / "drive_multinode.py"), address, "node_a", "node_b"],
            env=job_env,
            cwd=tmp_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            results, deadline = [], time.monotonic() + 240
            assert driver.stdout is not None
            for line in driver.stdout:
                if line.strip() == "READY" or time.monotonic() > deadline:
                    break
                if line.startswith("{"):
                    results.append(json.loads(line))
            assert len(results) == 2, results
            assert len({r["node"] for r in results}) == 2, "one actor on each raylet"
            assert all(r["hooked"] and r["enabled"] == "1" and r["flushed"] for r in results), results
            # the header travels too (in runtime_env, which Ray's dashboard shows: the README says so)
            assert all(r["headers"] == "x-team=rl" for r in results), results
            # push: each node's actor's span reached the receiver, from its own process
            pids = {r["pid"] for r in results}
            assert rx.wait_for(
                lambda r: {s.resource.get("process.pid") for s in r.spans if s.name == "multinode.probe"} >= pids,
                timeout=30,
            ), rx.received.spans
            # pull: each actor's /metrics is listed under an address another host can reach, and answers there
            groups = json.loads((data / "prometheus_targets.json").read_text())
            listed = {g["labels"]["__verl_otel_pid"]: g["targets"][0] for g in groups}
            for pid in pids:
                target = listed[str(pid)]
                host = target.rsplit(":", 1)[0]  # (a host name resolving to 127.0.0.1 is no better)
                assert not ipaddress.ip_address(socket.gethostbyname(host)).is_loopback, target
                with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as resp:
                    assert b"verl_otel_dropped" in resp.read()
        finally:
            if driver.stdin is not None:
                driver.stdin.close()
            driver.wait(timeout=120)
