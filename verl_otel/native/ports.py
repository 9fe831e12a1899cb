"""Where the native stack listens. The published ports are compose's (docker-compose.yml); the internal ones are
moved apart, because the Collector's and Jaeger's configs both default to :13133 (health) and :8888 (own
metrics), and Jaeger's OTLP receiver cannot share 4317/4318 with the Collector's."""

from __future__ import annotations

import socket
from dataclasses import dataclass, fields, replace


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
        """Every port one the OS picks (tests; several stacks on one machine)."""
        socks = []
        try:
            for _ in fields(cls):
                s = socket.socket()
                s.bind(("127.0.0.1", 0))
                socks.append(s)
            return cls(*(s.getsockname()[1] for s in socks))
        finally:
            for s in socks:
                s.close()

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
