"""The OpenTelemetry instrumentor for verl (``opentelemetry-instrument`` finds it through the
``opentelemetry_instrumentor`` entry point), and the import-time registration the .pth uses."""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

_instruments = ("verl >= 0.8.0",)
_lock = threading.Lock()
_registered = False


def _targets() -> tuple[Any, ...]:
    from verl_otel.hooks import ALL_TARGETS
    from verl_otel.hooks.ray_env import RAY_TARGETS

    return (*RAY_TARGETS, *ALL_TARGETS)


def register_import_hooks() -> None:
    """Install every hook target; each is applied when (or if already) its module is imported."""
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True
    from verl_otel.hooks import registry

    registry.install(_targets())


def unregister_import_hooks() -> None:
    global _registered
    from verl_otel.hooks import registry

    registry.uninstall(_targets())
    with _lock:
        _registered = False


class VerlInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Step traces, phase spans, rollout progress and training metrics for verl.

    Usage::

        from verl_otel.instrumentor import VerlInstrumentor
        VerlInstrumentor().instrument()
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        register_import_hooks()

    def _uninstrument(self, **kwargs: Any) -> None:
        unregister_import_hooks()
