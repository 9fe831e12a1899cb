"""The training-progress dashboard's "Rollout engine" row: vLLM's own /metrics page of each rollout server."""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.dashboards.grafana import (
    Panel,
    Row,
    Target,
)

_R = "$__rate_interval"


# -- Rollout engine (vLLM's own /metrics page of each rollout server, listed in file_sd by verl-otel) -------
#: a rollout server's page carries no run labels unless the run put them there: "|" admits their absence
_ENGINE_SEL = (
    f'{sc.LABEL_PROCESS_ROLE}="{sc.PROCESS_ROLE_ROLLOUT_SERVER}", {sc.LABEL_PROJECT}=~"$project|", '
    f'{sc.LABEL_EXPERIMENT}=~"$experiment|"'
)
_STUB = "vLLM's metrics exist only with the real vLLM rollout (verl-otel demo --rollout vllm); the stand-in has none"


def _e(name: str) -> str:
    return f"{name}{{{_ENGINE_SEL}}}"


def _quantiles(buckets: str, what: str) -> tuple[Target, ...]:
    return tuple(
        Target(
            f"histogram_quantile({q}, sum by (le, {sc.LABEL_REPLICA}) (rate({_e(buckets)}[{_R}])))",
            f"{what} p{int(q * 100)} replica {{{{replica}}}}",
        )
        for q in (0.5, 0.95)
    )


ENGINE_REQUESTS = Panel(
    "Rollout engine: requests running / waiting",
    "vLLM's requests being generated and queued, per rollout replica. Healthy: running near the batch's "
    "concurrency, waiting 0 or draining; waiting with nothing running is a stuck engine.",
    "timeseries",
    (
        Target(f"sum by ({sc.LABEL_REPLICA}) ({_e(sc.VLLM_REQUESTS_RUNNING)})", "running {{replica}}"),
        Target(f"sum by ({sc.LABEL_REPLICA}) ({_e(sc.VLLM_REQUESTS_WAITING)})", "waiting {{replica}}"),
    ),
    cpu_empty=_STUB,
)
ENGINE_KV = Panel(
    "Rollout engine: KV-cache usage and preemptions",
    "Share of the KV cache in use, and preemptions per second (requests evicted for lack of KV cache, recomputed "
    "later). Healthy: usage below 1, no preemptions; a full cache with preemptions makes long samples slow.",
    "timeseries",
    (
        Target(f"max by ({sc.LABEL_REPLICA}) ({_e(sc.VLLM_KV_CACHE_USAGE)})", "KV cache {{replica}}"),
        Target(
            f"sum by ({sc.LABEL_REPLICA}) (rate({_e(sc.VLLM_PREEMPTIONS)}[{_R}]))",
            "preemptions/s {{replica}}",
            unit="short",
        ),
    ),
    unit="percentunit",
    cpu_empty=_STUB,
)
ENGINE_TOKENS = Panel(
    "Rollout engine: generation tokens/s",
    "Tokens generated per second per rollout replica. Healthy: flat during rollouts; a drop with the same "
    "requests running means slower decoding (preemptions, long contexts).",
    "timeseries",
    (Target(f"sum by ({sc.LABEL_REPLICA}) (rate({_e(sc.VLLM_GENERATION_TOKENS)}[{_R}]))", "tokens/s {{replica}}"),),
    cpu_empty=_STUB,
)
ENGINE_LATENCY = Panel(
    "Rollout engine: time to first token and per-token latency",
    "p50 and p95 of the time to the first token (queue + prefill) and of the time between output tokens "
    "(decode), per replica. Healthy: a stable TTFT; a rising one means requests queue (see waiting).",
    "timeseries",
    (*_quantiles(sc.VLLM_TTFT_BUCKET, "TTFT"), *_quantiles(sc.VLLM_TPOT_BUCKET, "per token")),
    unit="s",
    cpu_empty=_STUB,
)

#: the progress dashboard's rollout-engine rows
ROWS = (Row(8, ENGINE_REQUESTS, ENGINE_KV, ENGINE_TOKENS), Row(8, ENGINE_LATENCY))
