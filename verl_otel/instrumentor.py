"""The OpenTelemetry instrumentor for verl (``opentelemetry-instrument`` finds it through the
``opentelemetry_instrumentor`` entry point), and the import-time registration the .pth uses."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

# ".dev0": OTel's dependency check, like pip, leaves pre-releases out of ">= 0.8.0", so a verl built from git
# (0.10.0.dev0) would be refused and nothing hooked; a specifier naming a pre-release lets them in
_instruments = ("verl >= 0.8.0.dev0",)


def register_import_hooks() -> None:
    """Install every hook target; each is applied when (or if already) its module is imported."""
    from verl_otel.hooks.targets import install_all

    install_all()


def unregister_import_hooks() -> None:
    from verl_otel.hooks.targets import uninstall_all

    uninstall_all()


class VerlInstrumentor(BaseInstrumentor):
    """Step traces, phase spans, rollout progress and training metrics for verl.

    Usage::

        from verl_otel.instrumentor import VerlInstrumentor
        VerlInstrumentor().instrument(tracer_provider=..., meter_provider=...)  # both optional
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        from verl_otel import runtime

        runtime.configure(kwargs.get("tracer_provider"), kwargs.get("meter_provider"))
        register_import_hooks()

    def _uninstrument(self, **kwargs: Any) -> None:
        unregister_import_hooks()
