"""What each environment variable means and its default, for the generated settings reference
(docs/reference/settings.md, ``make docs``): every ``ENV_*`` name of :mod:`.env` has a row here or is listed as
internal, which tests/test_docs.py checks."""

from __future__ import annotations

from typing import Final

from verl_otel.semconv.env import (
    ENV_AGENT_BIND,
    ENV_AGENT_QUEUE_DIR,
    ENV_CAPTURE,
    ENV_CAPTURE_MAX,
    ENV_CAPTURE_NEXT,
    ENV_CAPTURE_SECONDS,
    ENV_CAPTURE_TEXT,
    ENV_CONSOLE,
    ENV_DEPRECATED_NAMES,
    ENV_DIR,
    ENV_DRIVER_HOST,
    ENV_ENABLED,
    ENV_ENGINE_ENDPOINT,
    ENV_ENGINE_SPANS,
    ENV_EXPORT_BUFFER_MB,
    ENV_GATEWAY_ENDPOINT,
    ENV_HOSTNAME,
    ENV_JOB_OTEL,
    ENV_LOG_LEVEL,
    ENV_MAX_FILE_MB,
    ENV_MAX_FILES,
    ENV_MAX_METRIC_KEYS,
    ENV_MAX_TEXT,
    ENV_PROCESS_ROLE,
    ENV_PROGRESS_BAR_INTERVAL,
    ENV_PROGRESS_HEARTBEAT_SEC,
    ENV_PROGRESS_LOG,
    ENV_PROGRESS_LOG_INTERVAL,
    ENV_PROGRESS_LOG_META_PREVIEW,
    ENV_PROM_HOST,
    ENV_PROM_PORT,
    ENV_ROLLOUT_PROGRESS_BAR_WIDTH,
    ENV_ROLLOUT_PROGRESS_INTERVAL,
    ENV_ROLLOUT_PROGRESS_WORKER_INDEX,
    ENV_SAMPLE_SPANS,
    ENV_SD_PORT,
    ENV_SHUTDOWN_TIMEOUT,
    ENV_STALL,
    ENV_STALL_FACTOR,
    ENV_STALL_MIN_SECONDS,
    ENV_STALL_REPEAT_SECONDS,
    ENV_STALL_SECONDS,
)

#: variable -> (default, meaning), in the order the reference lists them (Markdown allowed)
ENV_DOC: Final[dict[str, tuple[str, str]]] = {
    ENV_ENABLED: (
        "on if an OTLP endpoint is set",
        "`1` turns instrumentation on (embedded default without an endpoint); `0` turns everything off",
    ),
    "OTEL_SDK_DISABLED": ("", "`true`: nothing runs"),
    "OTEL_EXPORTER_OTLP_ENDPOINT": (
        "",
        "OTLP collector (also the `_TRACES_`/`_METRICS_` variants); spans and metrics are pushed there",
    ),
    "OTEL_EXPORTER_OTLP_PROTOCOL": ("`grpc`", "`grpc` or `http/protobuf`"),
    "OTEL_SERVICE_NAME": ("`verl`", "standard resource setting (also `OTEL_RESOURCE_ATTRIBUTES`)"),
    "OTEL_TRACES_SAMPLER": ("parentbased_always_on", "standard sampler setting (also `OTEL_TRACES_SAMPLER_ARG`)"),
    "OTEL_METRIC_EXPORT_INTERVAL": ("`5000`", "ms between OTLP metric pushes"),
    ENV_DIR: ("`./verl-otel-data`", "embedded default: `traces.jsonl`, `prometheus_targets.json`"),
    ENV_PROM_PORT: (
        "`0` (any free port) in the embedded default, off with an endpoint",
        "serve `/metrics` in every instrumented process",
    ),
    ENV_PROM_HOST: (
        "`127.0.0.1` (the node's IP on a Ray worker node)",
        "bind address of `/metrics`; `0.0.0.0` (other hosts scrape it) lists it in file_sd under the node's address",
    ),
    ENV_SD_PORT: (
        "off",
        "the Ray driver serves every node's `/metrics` targets at `http://HOST:PORT/targets` (Prometheus "
        "`http_sd_configs`)",
    ),
    ENV_HOSTNAME: (
        "the machine's",
        "this host's name in file names, the `verl_host` label and merge keys; not forwarded to other nodes",
    ),
    ENV_SAMPLE_SPANS: ("`8`", "`rollout.sample` spans per agent-loop worker per batch (the slowest ones)"),
    ENV_CAPTURE_TEXT: ("`0`", "`1`: validation generations carry prompt/response text"),
    ENV_MAX_TEXT: ("`2000`", "characters kept per text"),
    ENV_MAX_METRIC_KEYS: (
        "`2000`",
        "distinct label sets per metric (training keys); more are dropped and counted",
    ),
    ENV_CONSOLE: ("`1` (`0` in console-only mode)", "the one-line-per-step console summary"),
    ENV_SHUTDOWN_TIMEOUT: (
        "`5`",
        "seconds a process may wait, in total, for its exports at fit end and exit (a collector that never answers "
        "costs this once)",
    ),
    ENV_MAX_FILE_MB: ("`256`", "the embedded trace file rotates past this size into `traces.jsonl.1` .."),
    ENV_EXPORT_BUFFER_MB: (
        "`64`",
        "OTLP push: spans a process keeps in memory while the collector does not take them, and as much again on "
        "disk in `$VERL_OTEL_DIR/unsent/`",
    ),
    ENV_MAX_FILES: ("`4`", "trace files kept (`traces.jsonl` and 3 rotated ones); `slow-steps` reads them as one"),
    ENV_LOG_LEVEL: (
        "`INFO`",
        "verl-otel's own log lines (`[verl-otel] LEVEL ...` on stderr; a handler you put on the `verl_otel` logger "
        "gets them instead)",
    ),
    ENV_ENGINE_SPANS: (
        "`1`",
        "with verl's vLLM rollout: vLLM's own `llm_request` span under each sample of a sampled step (queue, "
        "prefill, decode, time to first token); `0` leaves vLLM's tracing alone",
    ),
    ENV_DEPRECATED_NAMES: (
        "`1`",
        "renamed labels are exported under their old name too, on the same series, as are renamed span and resource "
        "attributes and `doctor --json` keys (CHANGELOG.md, deprecation rule); `0`: only the new names",
    ),
    ENV_STALL: ("`1`", "`0`: no stall detection"),
    ENV_STALL_SECONDS: (
        "`1800`",
        "a phase or hooked call in flight longer than this is a stall (the cap; the only threshold before the "
        "phase has a history)",
    ),
    ENV_STALL_MIN_SECONDS: (
        "`120`",
        "... or longer than `max(this, VERL_OTEL_STALL_FACTOR x the median of its earlier runs)`",
    ),
    ENV_STALL_FACTOR: ("`5`", "... (see above)"),
    ENV_STALL_REPEAT_SECONDS: (
        "`600`",
        "a stall's stacks are taken again after this many more seconds (does it move?), up to 4 dumps",
    ),
    ENV_CAPTURE: (
        "`1`",
        "a stalled process records a sampling profile of itself while it is stuck (`py-spy record`, or its own "
        "stack sampling where py-spy is missing or refused) under `captures/`; `0`: none (the next step's profile by "
        "verl's profiler is its own setting, `VERL_OTEL_CAPTURE_NEXT`, off unless set)",
    ),
    ENV_CAPTURE_SECONDS: ("`5`", "how long a capture samples (at 100 Hz, without pausing the process)"),
    ENV_CAPTURE_MAX: ("`4`", "captures per process and run (at most 2 per phase, 60 s apart)"),
    ENV_CAPTURE_NEXT: (
        "`0`",
        "`1`: a stall in step K (legacy and v1 trainers) adds K+1 to verl's `global_profiler.steps`, once per phase "
        "and at most `VERL_OTEL_CAPTURE_MAX` times; verl's profiler must be set up (docs/guides/hangs.md)",
    ),
    ENV_PROGRESS_LOG: (
        "`0`",
        "`1`: the seed's `[VERL_PROGRESS]` lines; alone (no `VERL_OTEL_ENABLED=1`, no endpoint) it is console-only "
        "mode: no trace file, no port, no exporter",
    ),
    ENV_PROGRESS_LOG_INTERVAL: ("`1`", "print a step's progress lines only when `step % N == 0`"),
    ENV_PROGRESS_BAR_INTERVAL: ("`1`", "actor/critic update bar every N mini-batches"),
    ENV_PROGRESS_HEARTBEAT_SEC: ("`5`", '"still running" line of a running phase every N seconds'),
    ENV_PROGRESS_LOG_META_PREVIEW: (
        "`6`",
        "meta keys shown on the `rollout start` line (and reward extra keys on `reward done`); `...` for the rest",
    ),
    ENV_ROLLOUT_PROGRESS_INTERVAL: (
        "`1`",
        "rollout bars (per worker and the manager's total) every N finished samples",
    ),
    ENV_ROLLOUT_PROGRESS_WORKER_INDEX: ("`0`", "which agent-loop worker prints its bar; `-1`: all"),
    ENV_ROLLOUT_PROGRESS_BAR_WIDTH: ("`24`", "bar width"),
    ENV_GATEWAY_ENDPOINT: (
        "",
        "read by the Collector agent (`deploy/otel-collector/agent.yaml`), not by verl-otel: the gateway's OTLP "
        "address the agent forwards to",
    ),
    ENV_AGENT_BIND: ("`127.0.0.1`", "the Collector agent's OTLP bind address (agent.yaml)"),
    ENV_AGENT_QUEUE_DIR: (
        "`/var/lib/otelcol/agent-queue`",
        "the folder of the Collector agent's queue on disk (agent.yaml)",
    ),
}

#: set by verl-otel itself in the processes it starts, not by users
ENV_INTERNAL: Final[dict[str, str]] = {
    ENV_PROCESS_ROLE: "a process' process role before a hook says it (default `ray_worker`; was `VERL_OTEL_ROLE`)",
    ENV_ENGINE_ENDPOINT: "the OTLP endpoint verl-otel gave a rollout engine's own tracing (not the user's collector)",
    ENV_DRIVER_HOST: "the driver's hostname, set on `ray.init`: a process on another host names a loopback endpoint",
    ENV_JOB_OTEL: (
        "the driver's `OTEL_*` variables (JSON), set on `ray.init` and applied only where verl-otel instruments the "
        "process; another SDK in the job (RL-Insight's hub) never sees them"
    ),
}
