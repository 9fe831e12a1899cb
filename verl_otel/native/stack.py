"""``up``: start the native stack (Jaeger, the Collector, Alertmanager, Prometheus, in the order data flows
backwards), each checked healthy before the next; ``down``: stop what a state directory recorded."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from verl_otel.native import configs, procs
from verl_otel.native.ports import Binds, Ports, in_use

ORDER = ("jaeger", "collector", "alertmanager", "prometheus")
STATE_FILE = "stack.json"


class StackError(RuntimeError):
    """The stack cannot start or stop; the message says why and what to do (no traceback for users)."""


@dataclass
class Stack:
    state: Path
    ports: Ports
    binds: Binds
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def otlp_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports.otlp_grpc}"

    @property
    def jaeger_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.jaeger_ui}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.prometheus}"

    @property
    def alertmanager_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.alertmanager}"

    @property
    def collector_metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.collector_metrics}/metrics"

    def urls(self) -> dict[str, str]:
        return {
            "OTLP (OTEL_EXPORTER_OTLP_ENDPOINT)": self.otlp_endpoint,
            "Jaeger": self.jaeger_url,
            "Prometheus": self.prometheus_url,
            "Alertmanager": self.alertmanager_url,
        }

    def start(
        self, name: str, root: Path, binaries: dict[str, Path], rules: Path | None = None, timeout_s: float = 120.0
    ) -> None:
        """(Re)start one part, e.g. Jaeger after it was stopped: same ports, same storage."""
        part = _part(name, binaries[name], root, self.state, self.ports, self.binds, rules)
        pid = procs.spawn(name, part.argv, self.state, part.env)
        self.pids[name] = pid
        if not procs.wait_healthy(pid, part.health_url, timeout_s):
            raise StackError(
                f"{name} did not become healthy at {part.health_url} within {timeout_s:.0f}s "
                f"(log {self.state / 'logs' / (name + '.log')}):\n{procs.log_tail(self.state, name)}"
            )

    def stop(self, name: str, crash: bool = False) -> None:
        """SIGTERM, as `stack down`; ``crash``: SIGKILL (its storage keeps only what it had written)."""
        pid = self.pids.pop(name, None)
        if pid is not None:
            procs.stop(self.state, name, pid, crash=crash)


def _part(name: str, exe: Path, root: Path, state: Path, ports: Ports, binds: Binds, rules: Path | None):
    if name == "prometheus":
        return configs.prometheus(exe, root, state, ports, binds, rules)
    builder = {"collector": configs.collector, "jaeger": configs.jaeger, "alertmanager": configs.alertmanager}[name]
    return builder(exe, root, state, ports, binds)


def _check_ports(ports: Ports, binds: Binds) -> None:
    published = {
        "otlp_grpc": binds.otlp,
        "otlp_http": binds.otlp,
        "jaeger_ui": binds.ui,
        "prometheus": binds.ui,
        "alertmanager": binds.ui,
    }
    taken = [
        f"{n} {published.get(n, '127.0.0.1')}:{p}" for n, p in ports.items() if in_use(published.get(n, "127.0.0.1"), p)
    ]
    if taken:
        raise StackError(f"ports in use: {', '.join(taken)} (another stack? `verl-otel stack down`, or other ports)")


def up(
    root: Path,
    state: Path,
    ports: Ports | None = None,
    binds: Binds | None = None,
    binaries: dict[str, Path | None] | None = None,
    rules: Path | None = None,
    timeout_s: float = 120.0,
) -> Stack:
    """Start the stack from the deploy files under ``root``; on any failure stop what was started."""
    ports, binds, state = ports or Ports(), binds or Binds(), state.absolute()
    state.mkdir(parents=True, exist_ok=True)
    if procs.running(state):
        raise StackError(f"a stack already runs from {state} (`verl-otel stack down` first)")
    try:
        exes = {n: configs.find_binary(n, (binaries or {}).get(n), root) for n in ORDER}
    except configs.ConfigError as err:
        raise StackError(str(err)) from None
    _check_ports(ports, binds)
    stack = Stack(state, ports, binds)
    try:
        for name in ORDER:
            stack.start(name, root, exes, rules, timeout_s)
    except (StackError, configs.ConfigError, OSError) as err:
        for name in reversed(list(stack.pids)):
            stack.stop(name)
        raise StackError(str(err)) from None
    (state / STATE_FILE).write_text(
        json.dumps(
            {
                "ports": asdict(ports),
                "binds": asdict(binds),
                "binaries": {n: str(p) for n, p in exes.items()},
                "urls": stack.urls(),
            },
            indent=1,
        )
    )
    return stack


def down(state: Path) -> list[str]:
    """Stop every process recorded in ``state`` (the last started first); returns their names."""
    found = procs.running(state)
    for name in sorted(found, key=lambda n: -ORDER.index(n) if n in ORDER else 0):
        procs.stop(state, name, found[name])
    return sorted(found)
