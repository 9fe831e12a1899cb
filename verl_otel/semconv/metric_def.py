"""What a metric is (:class:`MetricDef`) and the labels metrics carry; the metrics themselves are in
:mod:`.metrics` and :mod:`.why`."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Final, Literal

MetricKind = Literal["gauge", "counter", "histogram"]

# One word per concept: ``worker`` alone is a training worker (verl's ``Worker``, one per rank), a rollout
# worker is an agent-loop worker (``rollout_worker``), a rollout engine is a ``replica`` (semconv/engine.py).
LABEL_ROLLOUT_WORKER: Final = "rollout_worker"  # the agent-loop worker's index (was ``worker``)
LABEL_MODE: Final = "mode"
LABEL_PHASE: Final = "phase"
LABEL_ROLE: Final = "role"  # verl's role of a worker (``verl.trainer.ppo.utils.Role``): actor, critic, ref
LABEL_SIDE: Final = "side"  # the side of fully_async's MessageQueue that saw it: trainer, rollouter (was ``role``)
LABEL_KEY: Final = "key"
LABEL_REASON: Final = "reason"
LABEL_METHOD: Final = "method"  # a training-worker method (verl_worker_call_seconds)
LABEL_GPU: Final = "gpu"  # a GPU's NVML index on its node: bounded by the node's GPUs
LABEL_RANK: Final = "rank"  # a training worker's rank: bounded by the world size, not by the run's length
#: Per-process labels. Pull path: file_sd target labels; push path: the same names come from the
#: resource attributes through the Collector's resource_to_telemetry_conversion (`.` -> `_`).
LABEL_PROJECT: Final = "verl_project"
LABEL_EXPERIMENT: Final = "verl_experiment"
LABEL_PROCESS_ROLE: Final = "verl_process_role"
LABEL_HOST: Final = "verl_host"  # file_sd/http_sd target label: the process' host name (config.hostname())

#: Renamed labels, still exported under their old name beside the new one for at least one release
#: (CHANGELOG.md, "Deprecation rule"; off with ``VERL_OTEL_DEPRECATED_NAMES=0``): (old, new) per metric.
RENAMED_WORKER: Final = (("worker", LABEL_ROLLOUT_WORKER),)  # 0.1.0: the agent-loop worker's index
RENAMED_ASYNC_ROLE: Final = (("role", LABEL_SIDE),)  # 0.1.0: fully_async's side (role is actor/critic/ref)


@dataclass(frozen=True)
class MetricDef:
    """One exported metric. ``name`` is the Prometheus name users see; ``otel_name`` and
    ``unit`` are chosen so the OTel Collector's prometheus exporter translates back to it."""

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""
    otel_name: str = ""
    buckets: tuple[float, ...] = field(default=())
    #: (old label, new label) pairs of a rename in its deprecation period: the old name is exported too
    renamed: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.otel_name:
            object.__setattr__(self, "otel_name", _otel_name_for(self.name, self.kind))
        if self.renamed and (self.kind == "histogram" or any(new not in self.labels for _, new in self.renamed)):
            raise ValueError(f"{self.name}: a renamed label must be one of its labels, on a gauge or counter")

    @property
    def deprecated_labels(self) -> tuple[str, ...]:
        """The old names of renamed labels, exported after :attr:`labels` while their deprecation lasts."""
        return tuple(old for old, _ in self.renamed)


@functools.cache
def with_deprecated_labels(metric: MetricDef) -> tuple[MetricDef, tuple[int, ...]]:
    """The metric as exported with its old label names too (its labels, then the old names), and for each old
    name the index of the new label whose value it repeats: one series carries both names."""
    index = tuple(metric.labels.index(new) for _, new in metric.renamed)
    twin = MetricDef(
        metric.name, metric.kind, metric.help, metric.labels + metric.deprecated_labels, metric.unit, metric.otel_name
    )
    return twin, index


def _otel_name_for(name: str, kind: MetricKind) -> str:
    # Counters get `_total` appended by the OTLP->Prometheus translation: define them without it.
    if kind == "counter" and name.endswith("_total"):
        return name[: -len("_total")]
    return name
