"""The training-progress dashboard's "Why a step was slow" row (issue 28): time per 1k tokens by phase (more
tokens, or slower per token?), the rollout's long tail (slowest sample over the median one, per worker) and
straggling ranks (each rank's last worker call over the median rank's)."""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.dashboards.grafana import FILTERS, Panel, Row, Target, m
from verl_otel.dashboards.stragglers import rank_slowdown

TIME_PER_1K_TOKENS = Panel(
    "Time per 1k tokens by phase",
    "Seconds each phase of the last training step took per 1000 tokens (rollout: tokens generated; the others: "
    "prompt and response tokens of the batch). A phase whose duration rises while this stays flat got more "
    "tokens, not slower; `verl-otel slow-steps --per-token` ranks steps by it. Healthy: each line flat.",
    "timeseries",
    (Target(f"max by (phase) ({m(sc.PHASE_S_PER_1K_TOKENS.name)})", "{{phase}}"),),
    unit="s",
    cpu_empty="the v1 and fully_async trainers do not count tokens yet (legacy and its agent-loop manager do)",
)
ROLLOUT_TAIL = Panel(
    "Rollout long tail (slowest / median sample)",
    "Per agent-loop worker, its last training batch's slowest sample over its median sample. High: the rollout "
    "waited for a few samples (`verl-otel slow-steps` names them). Healthy: low and steady (1 is no tail).",
    "timeseries",
    (
        Target(
            f"max by ({sc.LABEL_ROLLOUT_WORKER}) ({m(sc.ROLLOUT_TAIL_RATIO.name)})", "rollout worker {{rollout_worker}}"
        ),
    ),
)
STRAGGLERS = Panel(
    "Straggling ranks (last call / median rank)",
    "Each training rank's last traced call of a method (worker.update_actor, compute_log_prob ...) over the median "
    "rank's: the step waits for the slowest. The VerlStragglingRank alert fires when one stays above its threshold. "
    "Healthy: every line near 1.",
    "timeseries",
    (Target(rank_slowdown(f"{{{FILTERS}}}"), "{{method}} {{role}} rank {{rank}}"),),
    cpu_empty="the CPU demo has one FSDP rank: its line is 1",
)
RESIDENT_MEMORY = Panel(
    "Resident memory by process",
    "Resident memory of every instrumented process, by its process role (trainer, training workers, agent-loop and "
    "reward workers). A line that climbs step after step is a leak (the VerlMemoryLeak alert). Healthy: flat after the "
    "first steps.",
    "timeseries",
    (
        Target(
            f"max by ({sc.LABEL_PROCESS_ROLE}, instance) ({m(sc.PROCESS_RESIDENT_MEMORY.name)})",
            "{{verl_process_role}} {{instance}}",
        ),
    ),
    unit="bytes",
)

#: the progress dashboard's rows of why a step is slow (tokens, the long tail, stragglers) and of its memory
ROWS = (Row(8, TIME_PER_1K_TOKENS, ROLLOUT_TAIL), Row(8, STRAGGLERS), Row(8, RESIDENT_MEMORY))
