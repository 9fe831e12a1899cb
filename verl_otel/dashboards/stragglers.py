"""A straggling rank: each rank's last traced worker call (``verl_worker_call_seconds``) against the median rank's
of the same method and role, recorded once (``verl:worker_rank_slowdown:ratio``) for the alert and the panel."""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.dashboards.rule import Record, Rule
from verl_otel.dashboards.thresholds import Thresholds

#: a rank is compared with the other ranks of its run's method and role
PEERS = f"{sc.LABEL_PROJECT}, {sc.LABEL_EXPERIMENT}, {sc.LABEL_METHOD}, {sc.LABEL_ROLE}"


def rank_slowdown(selector: str = "") -> str:
    """Each rank's last call over the median rank's (1: the median; one rank alone is always 1)."""
    calls = f"{sc.WORKER_CALL_SECONDS.name}{selector}"
    return f"max by ({PEERS}, {sc.LABEL_RANK}) ({calls}) / on({PEERS}) group_left quantile by ({PEERS}) (0.5, {calls})"


def straggler_records(t: Thresholds) -> list[Record]:
    return [Record(sc.RECORD_RANK_SLOWDOWN, rank_slowdown())]


def straggler_rules(t: Thresholds) -> list[Rule]:
    return [
        Rule(
            "VerlStragglingRank",
            f"{sc.RECORD_RANK_SLOWDOWN} > {t.straggler_ratio:g}",
            t.straggler_for,
            "warning",
            "rank {{ $labels.rank }} straggles in {{ $labels.method }} ({{ $labels.role }})",
            f"This rank's {{{{ $labels.method }}}} calls have taken more than {t.straggler_ratio:g}x the median "
            f"rank's for {t.straggler_for}: every step waits for it. Look at its node (thermal throttling, a slow "
            "link, another job) and at its data shard (longer sequences); `verl-otel slow-steps` names the "
            "straggling rank per phase from the worker.* spans.",
            cpu_empty="needs two or more training ranks, one of them slower (the CPU demo has one FSDP rank)",
        ),
    ]
