"""Start-up hook, imported by ``verl_otel_autoload.pth`` in every Python process of the venv when
verl-otel is switched on (VERL_OTEL_ENABLED=1 or an OTLP endpoint; the .pth line checks that).

It only registers post-import hooks on ``verl`` and ``ray``: nothing heavy is imported and no
exporter starts until verl itself is imported and a hook fires. Ray worker processes inherit the
environment (or get it through ``runtime_env``), so they instrument themselves the same way.
"""

from __future__ import annotations

import sys


def _run() -> None:
    try:
        from verl_otel.instrumentor import register_import_hooks

        register_import_hooks()
    except Exception as exc:  # noqa: BLE001 - a start-up hook must never break the interpreter
        print(f"[verl-otel] WARNING instrumentation disabled: {exc!r}", file=sys.stderr)


_run()
