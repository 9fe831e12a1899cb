"""Make the telemetry settings travel with the Ray job.

A local ``ray.init`` starts workers that inherit the driver's environment, but on a ``ray start``
cluster they inherit the raylet's. So ``ray.init`` gets our variables (VERL_OTEL_*, OTEL_* and
VERL_PROGRESS_*, with the driver's hostname) added to ``runtime_env.env_vars``, never overriding what the user set.
The process that called ``ray.init`` is the job's driver: it keeps the run's Prometheus targets of every node
(Runtime.discover).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from verl_otel import semconv as sc
from verl_otel.config import hostname
from verl_otel.hooks._safe import safe


def job_env() -> dict[str, str]:
    """The variables to forward; VERL_OTEL_DIR made absolute (workers may run elsewhere), and the driver's
    hostname, so a process on another node can tell that a loopback OTLP endpoint is not the driver's."""
    os.environ[sc.ENV_DIR] = os.path.abspath(os.environ.get(sc.ENV_DIR) or "./verl-otel-data")
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(sc.PROPAGATED_ENV_PREFIXES) and k not in sc.NOT_PROPAGATED_ENV  # a host's name stays home
    }
    env[sc.ENV_DRIVER_HOST] = hostname()  # this process is the driver: its host, not an inherited one
    return env


def merge_runtime_env(runtime_env: Any, env: dict[str, str]) -> dict[str, Any]:
    merged = dict(runtime_env or {})
    env_vars = dict(merged.get("env_vars") or {})
    for key, val in env.items():
        env_vars.setdefault(key, val)
    merged["env_vars"] = env_vars
    return merged


def _add_env(kwargs: dict[str, Any]) -> None:
    kwargs["runtime_env"] = merge_runtime_env(kwargs.get("runtime_env"), job_env())


def _discover() -> None:
    """The process that called ray.init is the job's driver: it lists every node's processes for Prometheus."""
    from verl_otel import model

    model.current().runtime.discover()


def init_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    safe(_add_env, kwargs)
    context = wrapped(*args, **kwargs)
    safe(_discover)
    safe(_note_ends)
    return context


def _note_ends() -> None:
    """The driver: Ctrl-C or a SIGTERM that reaches it leaves a note (export/run_end.py) the trainer reads when Ray
    ends it moments later, and ``doctor`` names. Main thread only (elsewhere: no note)."""
    from verl_otel import model

    model.current().runtime.ends.note(sc.ROLE_DRIVER)
