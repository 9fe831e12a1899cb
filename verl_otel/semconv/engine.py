"""The rollout engine (vLLM): its request spans under our samples, its /metrics in our file_sd. vLLM's own
span, attribute and metric names (vLLM 0.32), and ours about it."""

from __future__ import annotations

from typing import Final

#: the process role of a rollout server, and of its own /metrics in file_sd (vLLM's page)
PROCESS_ROLE_ROLLOUT_SERVER: Final = "rollout_server"
LABEL_REPLICA: Final = "replica"  # file_sd label: the rollout replica's rank
SPAN_ENGINE_REQUEST: Final = "llm_request"  # vLLM's span, one per request
ATTR_ENGINE_REPLICA: Final = "verl.rollout.replica"  # ours, on vLLM's span: the rollout replica that served it
#: vLLM's attributes on it (vLLM 0.32, gen_ai.* semantic conventions), seconds
ENGINE_ATTR_QUEUE: Final = "gen_ai.latency.time_in_queue"
ENGINE_ATTR_PREFILL: Final = "gen_ai.latency.time_in_model_prefill"
ENGINE_ATTR_DECODE: Final = "gen_ai.latency.time_in_model_decode"
ENGINE_ATTR_TTFT: Final = "gen_ai.latency.time_to_first_token"
ENGINE_ATTR_E2E: Final = "gen_ai.latency.e2e"
ENGINE_ATTR_REQUEST_ID: Final = "gen_ai.request.id"
ENGINE_ATTR_PROMPT_TOKENS: Final = "gen_ai.usage.prompt_tokens"
ENGINE_ATTR_COMPLETION_TOKENS: Final = "gen_ai.usage.completion_tokens"

#: vLLM's Prometheus series the "Rollout engine" dashboard row and alerts read (vLLM's names, not ours)
VLLM_REQUESTS_RUNNING: Final = "vllm:num_requests_running"
VLLM_REQUESTS_WAITING: Final = "vllm:num_requests_waiting"
VLLM_KV_CACHE_USAGE: Final = "vllm:kv_cache_usage_perc"
VLLM_PREEMPTIONS: Final = "vllm:num_preemptions_total"
VLLM_TTFT_BUCKET: Final = "vllm:time_to_first_token_seconds_bucket"  # histograms: the series queries read
VLLM_TPOT_BUCKET: Final = "vllm:inter_token_latency_seconds_bucket"
VLLM_GENERATION_TOKENS: Final = "vllm:generation_tokens_total"

VLLM_METRICS: Final[dict[str, str]] = {
    VLLM_REQUESTS_RUNNING: "vLLM (each rollout server's /metrics, file_sd role rollout_server): requests generating",
    VLLM_REQUESTS_WAITING: "vLLM: requests queued, not yet scheduled",
    VLLM_KV_CACHE_USAGE: "vLLM: share of the KV cache in use (0..1)",
    VLLM_PREEMPTIONS: "vLLM: requests preempted (KV cache full), counter",
    VLLM_TTFT_BUCKET: "vLLM: time to first token, histogram buckets (seconds)",
    VLLM_TPOT_BUCKET: "vLLM: time between output tokens, histogram buckets (seconds)",
    VLLM_GENERATION_TOKENS: "vLLM: tokens generated, counter",
}
