"""The demo's choices, read by the command line and the runner alike (a module that imports nothing, so
``--help`` imports no verl)."""

TRAINERS = ("v1", "legacy", "colocate_async", "separate_async", "fully_async")
TELEMETRY = ("console", "embedded", "otlp")
ROLLOUTS = ("stub", "vllm")
