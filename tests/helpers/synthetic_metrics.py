"""One scrape of every verl-otel metric, as Prometheus text exposition, built from verl_otel.semconv: two runs
behind one scrape target (as behind the Collector, where every process shares `instance`), two values of each
metric label, the verl keys the dashboards chart, and DCGM's memory gauges. Real Prometheus then evaluates the
dashboard and alert expressions on data, which is where matching errors (many-to-many) show."""

from __future__ import annotations

from itertools import product

from verl_otel import semconv as sc
from verl_otel.semconv import DCGM_FB_FREE, DCGM_FB_USED

RUNS = (("p", "e1"), ("p", "e2"))

#: verl keys as verl logs them (the brief's list plus the critic and length keys the panels chart)
VERL_KEYS = (
    "critic/score/mean",
    "critic/rewards/mean",
    "critic/grad_norm",
    "critic/vf_loss",
    "actor/entropy",
    "actor/grad_norm",
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/kl_loss",
    "response_length/mean",
    "response_length/max",
    "response_length/clip_ratio",
    "perf/throughput",
    "perf/max_memory_allocated_gb",
    "actor/perf/max_memory_reserved_gb",
    "timing_s/step",
    "timing_s/gen",
    "timing_s/update_actor",
    "timing_per_token_ms/gen",
    "timing_per_token_ms/update_actor",
    "val-core/openai/gsm8k/acc/mean@1",
    "val/test_score/openai/gsm8k",
    "critic/score/max",
    "critic/score/min",
    "actor/reward_kl_penalty",
)

_LABEL_VALUES: dict[str, tuple[str, ...]] = {
    sc.LABEL_PHASE: (sc.PHASE_ROLLOUT, sc.PHASE_UPDATE_ACTOR, sc.PHASE_VALIDATE),
    sc.LABEL_ROLLOUT_WORKER: ("0", "1"),
    sc.LABEL_MODE: (sc.MODE_TRAIN, sc.MODE_VALIDATE),
    sc.LABEL_ROLE: ("actor", "critic"),
    sc.LABEL_SIDE: (sc.PROCESS_ROLE_TRAINER, sc.PROCESS_ROLE_ROLLOUTER),
    sc.LABEL_KEY: VERL_KEYS,
    sc.LABEL_REASON: sc.DROP_REASONS[:2],
    sc.LABEL_METHOD: ("update_actor", "compute_log_prob"),
    sc.LABEL_RANK: ("0", "1"),
    sc.LABEL_GPU: ("0", "1"),
    sc.LABEL_POOL: (sc.POOL_COLOCATED, sc.POOL_ROLLOUT),
    sc.LABEL_BUCKET: (sc.BUCKET_GENERATING, sc.BUCKET_IDLE),
    sc.LABEL_TOOL: ("search", "run_python"),
    sc.LABEL_OUTCOME: (sc.TOOL_OK, sc.TOOL_RAISED),
    sc.LABEL_PART: (sc.PART_GENERATE, sc.PART_TOOLS, sc.PART_OTHER),
}


def _labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


def _series(metric: sc.MetricDef) -> list[dict[str, str]]:
    out = []
    for (project, experiment), values in product(RUNS, product(*(_LABEL_VALUES[lbl] for lbl in metric.labels))):
        out.append(
            {
                sc.LABEL_PROJECT: project,
                sc.LABEL_EXPERIMENT: experiment,
                **dict(zip(metric.labels, values, strict=True)),
            }
        )
    return out


def _vllm(step: int) -> list[str]:
    """vLLM's page of two rollout servers as verl-otel lists them in file_sd (process role, replica; no run label)."""
    lines: list[str] = []
    for replica in ("0", "1"):
        base = {sc.LABEL_PROCESS_ROLE: sc.PROCESS_ROLE_ROLLOUT_SERVER, sc.LABEL_REPLICA: replica, "engine": "0"}
        for name, value in (
            (sc.VLLM_REQUESTS_RUNNING, 4),
            (sc.VLLM_REQUESTS_WAITING, 1),
            (sc.VLLM_KV_CACHE_USAGE, 0.5),
            (sc.VLLM_PREEMPTIONS, step),
            (sc.VLLM_GENERATION_TOKENS, 100 * step),
        ):
            lines.append(f"{name}{_labels(base)} {value}")
        for buckets in (sc.VLLM_TTFT_BUCKET, sc.VLLM_TPOT_BUCKET):
            for le in ("0.01", "0.1", "1", "+Inf"):
                lines.append(f"{buckets}{_labels({**base, 'le': le})} {step}")
    return lines


def exposition(step: int = 3) -> str:
    """Text exposition of every semconv metric (and DCGM's) with plausible values."""
    lines: list[str] = []
    for metric in sc.METRICS:
        lines.append(f"# TYPE {metric.name} {metric.kind}")
        for labels in _series(metric):
            if metric.kind == "histogram":
                for le in metric.buckets:
                    lines.append(f"{metric.name}_bucket{_labels({**labels, 'le': f'{le:g}'})} {step}")
                lines.append(f"{metric.name}_bucket{_labels({**labels, 'le': '+Inf'})} {step}")
                lines.append(f"{metric.name}_sum{_labels(labels)} {10.0 * step}")
                lines.append(f"{metric.name}_count{_labels(labels)} {step}")
            else:
                value = 1 if metric is sc.PHASE_ACTIVE else (10 if metric is sc.TRAINING_STEPS_PLANNED else step)
                lines.append(f"{metric.name}{_labels(labels)} {value}")
    lines += _vllm(step)
    for name, value in ((DCGM_FB_USED, 1000), (DCGM_FB_FREE, 79000)):
        lines.append(f"# TYPE {name} gauge")
        for gpu in ("0", "1"):
            lines.append(f'{name}{{gpu="{gpu}",Hostname="node0"}} {value}')
    return "\n".join(lines) + "\n"
