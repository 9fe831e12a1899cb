"""Where the native stack listens. The published ports are compose's (docker-compose.yml); the internal ones are
moved apart, because the Collector's and Jaeger's configs both default to :13133 (health) and :8888 (own
metrics), and Jaeger's OTLP receiver cannot share 4317/4318 with the Collector's."""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass, fields, replace
from pathlib import Path

_EPHEMERAL_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_EPHEMERAL_DEFAULT = (32768, 60999)  # Linux's default, when the file cannot be read


@dataclass(frozen=True)
class Ports:
    # published by compose (docker-compose.yml), on the binds below
    otlp_grpc: int = 4317
    otlp_http: int = 4318
    jaeger_ui: int = 16686
    prometheus: int = 9090
    alertmanager: int = 9093
    # internal, always on 127.0.0.1
    collector_metrics: int = 8889  # the prometheus exporter Prometheus scrapes (job verl)
    collector_telemetry: int = 8888  # the Collector's own otelcol_* metrics (job otel-collector)
    collector_health: int = 13133
    jaeger_otlp_grpc: int = 14317  # the Collector's otlp/jaeger exporter sends here
    jaeger_otlp_http: int = 14318
    jaeger_grpc: int = 16685  # Jaeger's query gRPC API
    jaeger_health: int = 13134
    jaeger_telemetry: int = 8887

    @classmethod
    def free(cls) -> Ports:
        """Every port free now and outside the ephemeral range (tests; several stacks on one machine)."""
        return cls(*free_ports(len(fields(cls))))

    def with_(self, **changes: int) -> Ports:
        return replace(self, **changes)

    def items(self) -> list[tuple[str, int]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


@dataclass(frozen=True)
class Binds:
    """Like compose's VERL_OTEL_OTLP_BIND (the OTLP ingress) and VERL_OTEL_UI_BIND (Jaeger, Prometheus,
    Alertmanager); both loopback unless asked."""

    otlp: str = "127.0.0.1"
    ui: str = "127.0.0.1"


def in_use(host: str, port: int) -> bool:
    """Whether ``port`` cannot be bound on ``host`` now."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in _EPHEMERAL_FILE.read_text().split())
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT
    return low, high


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free now, outside the kernel's ephemeral range. A port the OS hands out for
    bind(0) comes from that range, so once its server stops (a restart in a test) an outgoing connection's
    local end may take it and the restarted server finds it in use; ports below the range are only taken
    by an explicit bind."""
    low, high = _ephemeral_range()
    pool = range(20000, low) if low - 20000 >= 1000 else range(high + 1, 65536)
    picked: list[int] = []
    rng = random.SystemRandom()
    for _ in range(100 * count):
        port = rng.choice(pool)
        if port not in picked and not in_use(host, port):
            picked.append(port)
            if len(picked) == count:
                return picked
    raise OSError(f"no {count} free ports in {pool.start}..{pool.stop - 1} on {host}")


def free_port(host: str = "127.0.0.1") -> int:
    """One port free now, outside the ephemeral range (see ``free_ports``)."""
    return free_ports(1, host)[0]
