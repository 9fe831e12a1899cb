"""verl-otel: OpenTelemetry and Prometheus observability for verl RL training.

Usage::

    pip install verl-otel
    OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317 python -m verl.trainer.main_ppo ...

or ``VERL_OTEL_ENABLED=1`` for the embedded default (``./verl-otel-data/traces.jsonl``, local
``/metrics``), or in code :func:`instrument` / :func:`uninstrument`, or ``opentelemetry-instrument``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"


def instrument(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Hook verl in this process (and, through ``ray.init``, in the job's Ray workers). Spans and metrics
    of this process go to the given providers when there are (Ray workers use the environment's settings)."""
    from verl_otel.instrumentor import VerlInstrumentor

    VerlInstrumentor().instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)


def uninstrument() -> None:
    """Restore every verl function verl-otel wrapped."""
    from verl_otel.instrumentor import VerlInstrumentor

    VerlInstrumentor().uninstrument()


__all__ = ["__version__", "instrument", "uninstrument"]
