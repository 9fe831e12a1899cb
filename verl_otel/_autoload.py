"""Start-up hook, imported by ``verl_otel_autoload.pth`` in every Python process of the venv that has one
of our variables set; it decides with the same parser as :mod:`verl_otel.config` (:mod:`verl_otel._env`).

It only registers post-import hooks (:mod:`verl_otel.hooks.targets`, wrappers named as strings): nothing
heavy is imported and no exporter starts until verl itself is imported and a hook fires. Ray worker
processes inherit the environment (or get it through ``runtime_env``), so they instrument themselves the
same way.
"""

from __future__ import annotations

import sys


def _run() -> None:
    try:
        from verl_otel import _env

        if _env.mode(_env.with_job_otel()) == _env.MODE_OFF:  # an endpoint the driver carried switches it on
            return
        from verl_otel.hooks.targets import install_all

        install_all()
    except Exception as exc:  # noqa: BLE001 - a start-up hook must never break the interpreter
        print(f"[verl-otel] WARNING instrumentation disabled: {exc!r}", file=sys.stderr)


_run()
