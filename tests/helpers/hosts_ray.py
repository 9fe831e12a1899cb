"""A real Ray cluster across namespaced hosts (helpers/hosts.py): the head on host A, a worker node on each
other host, each started inside its host with its own ``--node-ip-address`` and a custom resource named after
the host (``{"hostb": 1}``), so a test can pin work to a host and check where it ran. Ray's temp dir is each
host's own ``/tmp/ray``; its object store is each host's private ``/dev/shm``. The nodes run daemonized inside
their hosts' PID namespaces and end with the holders (Hosts.close)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from helpers.hosts import Host, Hosts
from helpers.procs import ROOT, clean_env
from helpers.prom import PromServer

GCS_PORT = 6379  # each host is its own port space: Ray's defaults do not clash
BIN = Path(sys.executable).parent
RAY = str(BIN / "ray")
_STARTUP_TIMEOUT = "timed out during startup"


def host_env(**extra: str) -> dict[str, str]:
    """The environment of a command on a host: this test process' (telemetry settings dropped), our worktree
    first on PYTHONPATH (so Ray's workers import this checkout), the venv's tools on PATH, plus ``extra``."""
    env = clean_env(
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        PATH=os.pathsep.join([str(BIN), os.environ.get("PATH", "/usr/bin:/bin")]),
        RAY_AUTH_MODE="disabled",  # token auth is on where ~/.ray/auth_token exists; joining nodes don't send it
        RAY_DEDUP_LOGS="0",
        RAY_USAGE_STATS_ENABLED="0",
    )
    env.pop("RAY_ADDRESS", None)
    env.update(extra)
    return env


class RayCluster:
    """``RayCluster(hosts).start()``: ``address`` is the head's GCS (host A's address, not loopback)."""

    def __init__(self, hosts: Hosts, num_cpus: int = 4, object_store_mib: int = 256) -> None:
        self.hosts, self.num_cpus, self.object_store_mib = hosts, num_cpus, object_store_mib

    @property
    def address(self) -> str:
        return f"{self.hosts[0].addr}:{GCS_PORT}"

    def _start(self, host: Host, *args: str) -> None:
        cmd = [
            RAY,
            "start",
            f"--node-ip-address={host.addr}",
            f"--num-cpus={self.num_cpus}",
            f'--resources={{"{host.name}": 1}}',
            f"--object-store-memory={self.object_store_mib * 2**20}",
            "--disable-usage-stats",
            *args,
        ]
        for attempt in range(1, 4):  # Ray gives a raylet a fixed 30 s to register: a loaded machine misses it
            # every host's interface is eth0: gloo binds there, not to the address its hostname resolves to
            proc = host.run(cmd, env=host_env(GLOO_SOCKET_IFNAME="eth0"), timeout=180, check=False)
            if proc.returncode == 0:
                return
            if _STARTUP_TIMEOUT not in proc.stdout + proc.stderr or attempt == 3:
                raise AssertionError(f"ray start on {host.name}: {proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            host.run([RAY, "stop", "--force"], env=host_env(), check=False)  # this host's Ray only (own PIDs)
            time.sleep(5 * attempt)

    def start(self) -> RayCluster:
        head, *others = list(self.hosts)
        self._start(head, "--head", f"--port={GCS_PORT}", "--include-dashboard=false")
        for host in others:
            self._start(host, f"--address={self.address}")
        return self

    def python(self, host: Host, code: str, timeout: float = 180, **env: str) -> str:
        """Run a Python snippet on ``host`` (a driver there when it calls ray.init(address=...)); its stdout."""
        return host.run([sys.executable, "-c", code], env=host_env(**env), timeout=timeout).stdout


class HostProm(PromServer):
    """A real Prometheus inside ``host`` (it reaches every host's addresses and that host's loopback), with only
    an http_sd config pointing at ``sd_url``; it listens on the host's address, so the test queries it from
    here. Its files are under the host's ``/tmp/prom``; it ends with the host or at ``stop()``."""

    def __init__(self, host: Host, sd_url: str) -> None:
        self.host = host
        sd = {"job_name": "verl", "http_sd_configs": [{"url": sd_url, "refresh_interval": "2s"}]}
        super().__init__(
            host.outside("/tmp/prom"), config={"global": {"scrape_interval": "1s"}, "scrape_configs": [sd]}
        )
        self.url = f"http://{host.addr}:{self.port}"

    def command(self) -> list[str]:
        return [*self.host.nsenter(), "--", "prometheus", "--config.file=/tmp/prom/prometheus.yml",
                f"--web.listen-address={self.host.addr}:{self.port}", "--storage.tsdb.path=/tmp/prom/data"]  # fmt: skip
