"""Make the telemetry settings travel with the Ray job.

A local ``ray.init`` starts workers that inherit the driver's environment, but on a ``ray start``
cluster they inherit the raylet's. So ``ray.init`` gets our variables (VERL_OTEL_* and VERL_PROGRESS_*, with the
driver's hostname) added to ``runtime_env.env_vars``, never overriding what the user set. OpenTelemetry's own
OTEL_* variables travel as one of ours (``VERL_OTEL_JOB_OTEL``), applied only in a process verl-otel instruments,
and a local cluster's raylet starts without them: another SDK in the job (RL-Insight's hub actor exports over
OTLP) keeps its own sampler, headers and switch.
The process that called ``ray.init`` is the job's driver: it keeps the run's Prometheus targets of every node
(Runtime.discover).
"""

from __future__ import annotations

import json
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
    env.pop(sc.ENV_JOB_OTEL, None)  # made anew from this process' OTEL_* below (a worker's ray.init: the same)
    otel = {k: v for k, v in os.environ.items() if k.startswith(sc.CARRIED_ENV_PREFIX)}
    if otel:
        env[sc.ENV_JOB_OTEL] = json.dumps(otel, sort_keys=True)
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
    from verl_otel import trackers

    trackers.current().runtime.discover()


def _take_otel() -> dict[str, str]:
    """A local ``ray.init`` starts the raylet from this process, and every worker inherits its environment: the
    OTEL_* variables leave it while Ray starts (they travel in VERL_OTEL_JOB_OTEL), and come back after. This
    process' runtime is made first: its settings are read with them."""
    from verl_otel import trackers

    trackers.current()  # the hooks reach the runtime through the trackers
    return {k: os.environ.pop(k) for k in [k for k in os.environ if k.startswith(sc.CARRIED_ENV_PREFIX)]}


def _give_back(taken: dict[str, str]) -> None:
    for key, val in taken.items():
        os.environ.setdefault(key, val)


def init_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    safe(_add_env, kwargs)
    taken = safe(_take_otel) or {}
    try:
        context = wrapped(*args, **kwargs)
    finally:
        safe(_give_back, taken)
    safe(_discover)
    safe(_note_ends)
    return context


def _note_ends() -> None:
    """The driver: Ctrl-C or a SIGTERM that reaches it leaves a note (export/run_end.py) the trainer reads when Ray
    ends it moments later, and ``doctor`` names. Main thread only (elsewhere: no note)."""
    from verl_otel import trackers

    trackers.current().runtime.ends.note(sc.PROCESS_ROLE_DRIVER)
