"""The verl-otel vocabulary: every span name, attribute key, metric name, label, unit and environment
variable, in one package so hooks, exporters, the CLI, dashboards and alert rules share it (or are tested
against it). By what it names:

- :mod:`.spans`: span names, span and resource attributes, phases, process roles, trainer kinds;
- :mod:`.metrics`: every exported metric (:class:`MetricDef`), labels, drop reasons, other exporters' metrics;
- :mod:`.verl`: verl's own names (timers, metric keys, per-sample fields) mapped to ours;
- :mod:`.engine`: the rollout engine's (vLLM's) span, attribute and metric names, and ours about it;
- :mod:`.env`: environment variables and the embedded default's file names (:mod:`.env_doc`: what each means);
- :mod:`.stall`: stall detection's span, attributes, classifications and evidence files;
- :mod:`.run_end`: how a run ended (an abrupt end's attributes and reasons);
- :mod:`.goodput`: what a step's GPU time was spent on (buckets, pools, the step span's attributes, metrics).
- :mod:`.agent`: agentic rollouts (turn and tool-call spans, tool outcomes, their metrics).

``from verl_otel import semconv as sc`` gives all of them (``sc.SPAN_STEP``, ``sc.ROLLOUT_ETA``).

Metric names are a user-facing API: dashboards and alerts depend on them, so a renamed metric, label or span
attribute is exported under both names for at least one release (``VERL_OTEL_DEPRECATED_NAMES``; a label:
``MetricDef.renamed``) and CHANGELOG.md says so, as vLLM does for its ``vllm:`` metrics. No label carries a
step number, sample index, uid or trace id: identities live in traces.
"""

# the one namespace of the vocabulary (each module defines disjoint names: tests/test_layers.py)
from verl_otel.semconv.agent import *  # noqa: F403
from verl_otel.semconv.engine import *  # noqa: F403
from verl_otel.semconv.env import *  # noqa: F403
from verl_otel.semconv.env_doc import *  # noqa: F403
from verl_otel.semconv.goodput import *  # noqa: F403
from verl_otel.semconv.metric_def import *  # noqa: F403
from verl_otel.semconv.metrics import *  # noqa: F403
from verl_otel.semconv.run_end import *  # noqa: F403
from verl_otel.semconv.spans import *  # noqa: F403
from verl_otel.semconv.stall import *  # noqa: F403
from verl_otel.semconv.verl import *  # noqa: F403
from verl_otel.semconv.why import *  # noqa: F403
