"""Environment variables (ours, VERL_PROGRESS_* and the standard OTEL_* ones) and the embedded default's file names."""

from __future__ import annotations

from typing import Final

# --------------------------------------------------------------------------------------------
# Environment variables (ours, VERL_PROGRESS_* and the standard OTEL_* ones)
# --------------------------------------------------------------------------------------------
ENV_ENABLED: Final = "VERL_OTEL_ENABLED"
ENV_DIR: Final = "VERL_OTEL_DIR"
ENV_PROM_PORT: Final = "VERL_OTEL_PROMETHEUS_PORT"
ENV_PROM_HOST: Final = "VERL_OTEL_PROMETHEUS_HOST"
ENV_SAMPLE_SPANS: Final = "VERL_OTEL_SAMPLE_SPANS"
ENV_CAPTURE_TEXT: Final = "VERL_OTEL_CAPTURE_TEXT"
ENV_MAX_TEXT: Final = "VERL_OTEL_MAX_TEXT"
ENV_MAX_METRIC_KEYS: Final = "VERL_OTEL_MAX_METRIC_KEYS"
ENV_CONSOLE: Final = "VERL_OTEL_CONSOLE"
ENV_PROCESS_ROLE: Final = "VERL_OTEL_PROCESS_ROLE"
ENV_SHUTDOWN_TIMEOUT: Final = "VERL_OTEL_SHUTDOWN_TIMEOUT"  # seconds fit end may wait for exports, in total
ENV_MAX_FILE_MB: Final = "VERL_OTEL_MAX_FILE_MB"  # the trace file rotates past this size
ENV_MAX_FILES: Final = "VERL_OTEL_MAX_FILES"  # trace files kept: traces.jsonl and traces.jsonl.1 .. .N-1
ENV_LOG_LEVEL: Final = "VERL_OTEL_LOG_LEVEL"
# MB of spans a process keeps in memory while the collector does not answer (and as much again on disk)
ENV_EXPORT_BUFFER_MB: Final = "VERL_OTEL_EXPORT_BUFFER_MB"
ENV_ENGINE_SPANS: Final = "VERL_OTEL_ENGINE_SPANS"  # 0: no inference-engine (vLLM) request spans under samples
# 0: renamed labels only under their new name (CHANGELOG.md, "Deprecation rule"); default 1 for a release
ENV_DEPRECATED_NAMES: Final = "VERL_OTEL_DEPRECATED_NAMES"
# this host's name in file names, labels and merge keys (default: the machine's); never forwarded to other nodes
ENV_HOSTNAME: Final = "VERL_OTEL_HOSTNAME"
# the run's Prometheus service discovery (http_sd_configs) on the Ray driver: a fixed port; unset or 0: none
ENV_SD_PORT: Final = "VERL_OTEL_SD_PORT"
# stall detection (docs/guides/hangs.md)
ENV_STALL: Final = "VERL_OTEL_STALL"  # 0: no stall detection
ENV_STALL_SECONDS: Final = "VERL_OTEL_STALL_SECONDS"  # absolute threshold (the cap)
ENV_STALL_MIN_SECONDS: Final = "VERL_OTEL_STALL_MIN_SECONDS"  # the relative threshold's floor
ENV_STALL_FACTOR: Final = "VERL_OTEL_STALL_FACTOR"  # x the median of earlier runs of the phase/call
ENV_STALL_REPEAT_SECONDS: Final = "VERL_OTEL_STALL_REPEAT_SECONDS"  # stacks again after this many more seconds
ENV_CAPTURE: Final = "VERL_OTEL_CAPTURE"  # 0: no sampling profile of a stalled process
ENV_CAPTURE_SECONDS: Final = "VERL_OTEL_CAPTURE_SECONDS"  # how long a capture samples
ENV_CAPTURE_MAX: Final = "VERL_OTEL_CAPTURE_MAX"  # captures per process and run
ENV_CAPTURE_NEXT: Final = "VERL_OTEL_CAPTURE_NEXT"  # 1: a stall arms verl's own profiler for the next step
# set by us in a rollout server whose engine tracing we switched on: the OTLP endpoint we gave the engine
# (vLLM then exports OTEL_EXPORTER_OTLP_TRACES_ENDPOINT with it; that one is not the user's collector)
ENV_ENGINE_ENDPOINT: Final = "VERL_OTEL_ENGINE_ENDPOINT"  # the start-up parser's copy: _env.ENGINE_ENDPOINT

# set by us on `ray.init` (hooks/ray_env.py): the driver's hostname, so a process on another node can tell that
# a loopback OTLP endpoint it was forwarded is not the driver's Collector
ENV_DRIVER_HOST: Final = "VERL_OTEL_DRIVER_HOST"
# set by us on `ray.init`: the driver's OTEL_* variables as one JSON object, applied only in a process verl-otel
# instruments (a process it does not, such as RL-Insight's hub actor, keeps its own OTel settings)
ENV_JOB_OTEL: Final = "VERL_OTEL_JOB_OTEL"  # the start-up parser's copy: _env.JOB_OTEL
# read by the Collector agent (deploy/otel-collector/agent.yaml), not by verl-otel: the gateway's OTLP address,
# the agent's OTLP bind address and its queue's folder
ENV_GATEWAY_ENDPOINT: Final = "VERL_OTEL_GATEWAY_ENDPOINT"
ENV_AGENT_BIND: Final = "VERL_OTEL_AGENT_BIND"
ENV_AGENT_QUEUE_DIR: Final = "VERL_OTEL_AGENT_QUEUE_DIR"

ENV_PROGRESS_LOG: Final = "VERL_PROGRESS_LOG"
ENV_PROGRESS_LOG_INTERVAL: Final = "VERL_PROGRESS_LOG_INTERVAL"
ENV_PROGRESS_BAR_INTERVAL: Final = "VERL_PROGRESS_BAR_INTERVAL"
ENV_PROGRESS_HEARTBEAT_SEC: Final = "VERL_PROGRESS_HEARTBEAT_SEC"
ENV_PROGRESS_LOG_META_PREVIEW: Final = "VERL_PROGRESS_LOG_META_PREVIEW"
ENV_ROLLOUT_PROGRESS_INTERVAL: Final = "VERL_ROLLOUT_PROGRESS_INTERVAL"
ENV_ROLLOUT_PROGRESS_WORKER_INDEX: Final = "VERL_ROLLOUT_PROGRESS_WORKER_INDEX"
ENV_ROLLOUT_PROGRESS_BAR_WIDTH: Final = "VERL_ROLLOUT_PROGRESS_BAR_WIDTH"

#: ours that stay in their process (a host's own name)
NOT_PROPAGATED_ENV: Final[tuple[str, ...]] = (ENV_HOSTNAME,)
#: Environment prefixes that travel to every Ray worker of the job (runtime_env env_vars).
PROPAGATED_ENV_PREFIXES: Final[tuple[str, ...]] = ("VERL_OTEL_", "VERL_PROGRESS_", "VERL_ROLLOUT_PROGRESS_")
#: OpenTelemetry's own variables travel inside ENV_JOB_OTEL instead: another library's SDK in the job (RL-Insight's
#: hub) must not export with a sampler, headers or a switch meant for verl-otel's
CARRIED_ENV_PREFIX: Final = "OTEL_"

# Embedded-default file names under VERL_OTEL_DIR
TRACES_FILE: Final = "traces.jsonl"
PROM_TARGETS_FILE: Final = "prometheus_targets.json"
UNSENT_DIR: Final = "unsent"  # spans the collector did not take before the shutdown budget ran out
HOSTS_DIR: Final = "hosts"  # `verl-otel gather`: OUT/hosts/<host>/ holds what it brought of each node

# Discovery across a Ray cluster: each process' /metrics address in Ray's GCS key-value store, under
# DISCOVERY_KV_PREFIX + "<ray job id>:<node id>:<pid>:<port>"; the driver lists them at SD_PATH
DISCOVERY_KV_PREFIX: Final = "verl_otel:targets:"
SD_PATH: Final = "/targets"
