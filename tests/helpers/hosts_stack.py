"""The real Collector and Jaeger of `make stack-bin` inside namespaced hosts (helpers/hosts.py), from deploy/'s very
files and verl_otel.native's command lines: on the head (host A) Jaeger and the gateway (deploy/otel-collector/
config.yaml, its OTLP ports open to the other hosts), on another host an agent (agent.yaml: that host's loopback
in, its queue on disk, out to the gateway at A's address). Each part runs under nsenter in its host's PID
namespace, so it ends with the host whatever happens; ``kill()`` SIGKILLs the binary itself.

Their state (queues, Badger) lies under a folder outside /tmp (``state``), which every host sees at the same
path (each host has its own /tmp). Health is asked inside the host (its loopback is not this namespace's)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers.hosts import Host
from helpers.procs import ROOT, clean_env

from verl_otel.native import Binds, Ports, configs
from verl_otel.native.agent import AgentPorts, agent_part
from verl_otel.native.configs import Part
from verl_otel.native.ports import free_ports

_PROBE = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)"


@dataclass
class HostPart:
    """One part (``configs.Part``) run inside ``host``; its output in ``log``."""

    host: Host
    part: Part
    log: Path
    popen: subprocess.Popen | None = field(default=None, repr=False)
    pid: int | None = None  # the binary's own pid (this namespace's view), nsenter's child

    def start(self, timeout_s: float = 120) -> HostPart:
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen(
                [*self.host.nsenter(), "--wd=/", "--", *self.part.argv],
                env=clean_env(**self.part.env), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.popen.poll() is None:
            if self.pid is None:
                with contextlib.suppress(OSError, ValueError):
                    kids = Path(f"/proc/{self.popen.pid}/task/{self.popen.pid}/children").read_text().split()
                    self.pid = int(kids[0]) if kids else None
            elif self.healthy():
                return self
            time.sleep(0.5)
        tail = self.log.read_text(errors="replace")[-2000:]
        self.stop()
        raise AssertionError(f"{self.part.name} on {self.host.name} not healthy at {self.part.health_url}:\n{tail}")

    def healthy(self) -> bool:
        cmd = [sys.executable, "-I", "-c", _PROBE, self.part.health_url]
        return self.host.run(cmd, {"PATH": "/usr/bin:/bin"}, timeout=20, check=False).returncode == 0

    def kill(self) -> None:
        """SIGKILL, as a lost node or the OOM killer ends it (what it acknowledged is on its disk queue)."""
        self._signal(signal.SIGKILL, 0)

    def stop(self) -> None:
        self._signal(signal.SIGTERM, 20)

    def _signal(self, sig: int, grace_s: float) -> None:
        if self.popen is None:
            return
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
        try:
            self.popen.wait(timeout=grace_s + 10)
        except subprocess.TimeoutExpired:
            if self.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
            self.popen.kill()
            self.popen.wait()
        self.popen, self.pid = None, None


@dataclass
class HostStack:
    """Jaeger and the gateway on ``head``, an agent on ``node``, all listening on the same OTLP port in their own
    host, so the driver's loopback endpoint (forwarded to every node) reaches each node's own Collector."""

    head: Host
    node: Host
    state: Path
    bins: dict[str, Path]
    ports: Ports = field(default_factory=Ports.free)
    parts: dict[str, HostPart] = field(default_factory=dict)

    @property
    def otlp_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports.otlp_grpc}"

    @property
    def jaeger_url(self) -> str:
        return f"http://{self.head.addr}:{self.ports.jaeger_ui}"

    def _part(self, name: str) -> HostPart:
        head, binds = self.state / "head", Binds("0.0.0.0", self.head.addr)  # A's own netns; B's agent sends here
        if name == "agent":
            node = self.state / self.node.name
            telemetry, health = free_ports(2)
            ports = AgentPorts(self.ports.otlp_grpc, self.ports.otlp_http, health, telemetry)
            gateway = f"{self.head.addr}:{self.ports.otlp_grpc}"
            part = agent_part(self.bins["collector"], ROOT, node, gateway, "127.0.0.1", ports)
            return HostPart(self.node, part, node / "agent.log")
        builder = configs.jaeger if name == "jaeger" else configs.collector
        part = builder(self.bins[name], ROOT, head, self.ports, binds)
        return HostPart(self.head, part, head / f"{name}.log")

    def start(self, name: str) -> None:
        """``jaeger``, ``collector`` (the gateway) or ``agent``; again after a kill: the same ports and folders."""
        part = self.parts.get(name) or self._part(name)
        part.log.parent.mkdir(parents=True, exist_ok=True)
        self.parts[name] = part.start()

    def up(self) -> HostStack:
        for name in ("jaeger", "collector", "agent"):
            self.start(name)
        return self

    def down(self) -> None:
        for part in reversed(list(self.parts.values())):
            part.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {n}:\n{p.log.read_text(errors='replace')[-1500:]}" for n, p in self.parts.items())
