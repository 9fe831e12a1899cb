"""What a Prometheus rule is: an alert (:class:`Rule`) or a recording rule (:class:`Record`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    cpu_empty: str | None = "fires only when the run is unhealthy (the CPU demo is healthy)"
    group: str = "verl-training"

    def to_dict(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {"summary": self.summary, "description": self.description},
        }


@dataclass(frozen=True)
class Record:
    """A recording rule: ``name`` (level:metric:operation, in semconv) evaluated from ``expr``."""

    name: str
    expr: str
    group: str = "verl-training"  # evaluated before the group's alerts, which may read it

    def to_dict(self) -> dict[str, Any]:
        return {"record": self.name, "expr": self.expr}
