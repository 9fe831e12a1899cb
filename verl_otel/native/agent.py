"""One node's Collector agent (deploy/otel-collector/agent.yaml) as a process: the file as it is, given the gateway's
address and its queue folder in the variables a user sets (VERL_OTEL_GATEWAY_ENDPOINT, VERL_OTEL_AGENT_QUEUE_DIR);
only its addresses are set (``--set``), so several agents and a gateway can share one machine (tests)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from verl_otel import semconv as sc
from verl_otel.native import procs
from verl_otel.native.configs import COLLECTOR_READER, Part, reader
from verl_otel.native.ports import free_ports

NAME = "agent"


@dataclass(frozen=True)
class AgentPorts:
    otlp_grpc: int = 4317
    otlp_http: int = 4318
    health: int = 13133
    telemetry: int = 8888  # its own metrics (otelcol_exporter_queue_size, ...)

    @classmethod
    def free(cls, host: str = "127.0.0.1") -> AgentPorts:
        return cls(*free_ports(len(fields(cls)), host))


def agent_part(exe: Path, root: Path, state: Path, gateway: str, bind: str, ports: AgentPorts) -> Part:
    """``gateway``: HOST:PORT of the gateway's OTLP gRPC receiver; ``bind``: the address the agent listens on
    (its health and own metrics too, so another host can probe it)."""
    queue = state / "agent-queue"
    queue.mkdir(parents=True, exist_ok=True)
    sets = {
        "receivers.otlp.protocols.grpc.endpoint": f"{bind}:{ports.otlp_grpc}",
        "receivers.otlp.protocols.http.endpoint": f"{bind}:{ports.otlp_http}",
        "extensions.health_check.endpoint": f"{bind}:{ports.health}",
        "service.telemetry.metrics.readers": reader(ports.telemetry, COLLECTOR_READER, bind),
    }
    argv = [str(exe), f"--config={root / 'deploy/otel-collector/agent.yaml'}"]
    argv += [f"--set={k}={v}" for k, v in sets.items()]
    env = {sc.ENV_GATEWAY_ENDPOINT: gateway, sc.ENV_AGENT_QUEUE_DIR: str(queue)}
    probe = "127.0.0.1" if bind == "0.0.0.0" else bind
    return Part(NAME, argv, f"http://{probe}:{ports.health}/", env)


@dataclass
class Agent:
    """An agent whose queue lives in ``state``: stopped, killed and started again on the same queue."""

    state: Path
    gateway: str
    bind: str = "127.0.0.1"
    ports: AgentPorts = AgentPorts()
    wrap: tuple[str, ...] = ()  # a command to run it through, e.g. ("ip", "netns", "exec", "host-b") (tests' hosts)
    pid: int | None = None

    @property
    def otlp_endpoint(self) -> str:
        host = "127.0.0.1" if self.bind == "0.0.0.0" else self.bind
        return f"http://{host}:{self.ports.otlp_grpc}"

    def start(self, exe: Path, root: Path, timeout_s: float = 60.0) -> None:
        part = agent_part(exe, root, self.state, self.gateway, self.bind, self.ports)
        self.pid = procs.spawn(NAME, [*self.wrap, *part.argv], self.state, part.env)
        if not procs.wait_healthy(self.pid, part.health_url, timeout_s):
            tail = procs.log_tail(self.state, NAME)
            self.stop()
            raise RuntimeError(f"the agent did not become healthy at {part.health_url}:\n{tail}")

    def stop(self, crash: bool = False) -> None:
        """SIGTERM; ``crash``: SIGKILL (the queue keeps what was written to it)."""
        if self.pid is not None:
            procs.stop(self.state, NAME, self.pid, crash=crash)
            self.pid = None
