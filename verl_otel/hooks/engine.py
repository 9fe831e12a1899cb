"""The rollout engine (vLLM) in the step's trace and in Prometheus.

Agent-loop side (:func:`client_generate`, verl's ``LLMServerClient.generate``): a request of a sample of a
sampled trace carries the sample's context (telemetry/engine_context.py) in vLLM's ``SamplingParams.extra_args``,
the place vLLM keeps for plugins' own values (it travels through verl's server untouched, and a server
without our hooks ignores it).

Server side (verl's ``vLLMHttpServer``, a Ray actor holding vLLM's ``AsyncLLM`` in its own process):

- :func:`run_server` switches vLLM's request tracing on (its ``otlp_traces_endpoint``, with log stats on:
  vLLM's tracing asserts per-request stats and would crash its output handler without them), and lists the
  server's ``/metrics`` (vLLM's own page) in the run's file_sd file (process role ``rollout_server``, ``replica``);
- :func:`init_tracer` (vLLM's, for our endpoint only): vLLM's request spans go through a tracer provider
  of ours in this process, to our destination (the trace file, or the user's collector) with our bounded
  queue; it records only spans under a sampled parent. vLLM's own set-up is skipped, so vLLM never puts
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` into its environment (its child processes would read it);
- :func:`engine_generate` (``AsyncLLM.generate``) turns the carried context into vLLM's ``trace_headers``.

``VERL_OTEL_ENGINE_SPANS=0`` switches the spans off (the metrics target stays).
"""

from __future__ import annotations

import inspect
import os
import weakref
from collections.abc import Callable
from typing import Any

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel._log import warn_once
from verl_otel.hooks._safe import safe
from verl_otel.hooks.verl_objects import rollout_engine, rollout_server

#: what we give vLLM as ``otlp_traces_endpoint``: not a URL; our init_tracer hook knows it
IN_PROCESS_ENDPOINT = "verl-otel:in-process"
_KEY = sc.TRACEPARENT_KEY


# -- agent-loop side -------------------------------------------------------------------------------
_is_vllm: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()  # per client: its config, read once


def _talks_to_vllm(client: Any) -> bool:
    """Only vLLM's server turns sampling_params into SamplingParams (extra_args); SGLang's takes no such key.
    Read once per client: an OmegaConf lookup costs tens of µs, a request must not pay it."""
    try:
        return _is_vllm[client]
    except KeyError:
        # the demo's stand-in server (cpu_stub) takes vLLM's sampling_params and watches its requests too
        answer = _is_vllm[client] = rollout_engine(client) in ("vllm", "cpu_stub")
        return answer


def _carried(client: Any, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    if not trackers.current().services.settings.engine_spans:
        return None
    from verl_otel.hooks.rollout import engine_traceparent

    tp = engine_traceparent()
    params = kwargs.get("sampling_params")
    if tp is None or not isinstance(params, dict) or not _talks_to_vllm(client):
        return None
    extra = params.get("extra_args")
    return {**params, "extra_args": {**(extra if isinstance(extra, dict) else {}), _KEY: tp}}


def client_generate(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from verl_otel.hooks.agent_loop import noted_output

    params = safe(_carried, instance, kwargs)
    if params is not None:
        kwargs = {**kwargs, "sampling_params": params}  # a copy: the agent loop's own dict is left as it was
    result = wrapped(*args, **kwargs)
    noted = safe(noted_output, result)  # the turn's finish reason
    return result if noted is None else noted


# -- server side -----------------------------------------------------------------------------------
def _switch_tracing_on(server: Any, ns: Any) -> None:
    m = trackers.current()
    m.wire(sc.PROCESS_ROLE_ROLLOUT_SERVER, index=_replica(server))
    rt = m.runtime
    replica = _replica(server)
    attrs = {} if replica is None else {sc.ATTR_ENGINE_REPLICA: replica}
    if (
        getattr(ns, "otlp_traces_endpoint", None) is None
        and rt.settings.engine_spans
        and not rt.settings.console_only
        and rt.engine_provider(attrs) is not None
    ):
        ns.otlp_traces_endpoint = IN_PROCESS_ENDPOINT
    endpoint = getattr(ns, "otlp_traces_endpoint", None)
    if endpoint is None:
        return
    if getattr(ns, "disable_log_stats", False):
        # vLLM's tracing reads each request's stats: without them its output handler fails an assertion
        ns.disable_log_stats = False
    if os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != endpoint:
        # vLLM may export its endpoint as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (for its children): not the user's
        os.environ[sc.ENV_ENGINE_ENDPOINT] = str(endpoint)


def _replica(server: Any) -> int | None:
    return rollout_server(server)[0]


def _list_metrics_page(server: Any) -> None:
    replica, node_rank, host, port = rollout_server(server)
    if host is None or port is None or node_rank not in (0, None):  # one page per replica: its first node's
        return
    rt = trackers.current().runtime
    labels = {**rt.run_labels(), sc.LABEL_PROCESS_ROLE: sc.PROCESS_ROLE_ROLLOUT_SERVER}
    if replica is not None:
        labels[sc.LABEL_REPLICA] = str(replica)
    rt.add_scrape_target(host, port, labels)


async def run_server(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    ns = args[0] if args else kwargs.get("args")
    safe(_switch_tracing_on, instance, ns)
    result = await wrapped(*args, **kwargs)
    safe(_list_metrics_page, instance)
    return result


def init_tracer(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """vLLM's ``init_tracer(name, endpoint, extra_attributes=None)``: ours for our endpoint."""
    endpoint = args[1] if len(args) > 1 else kwargs.get("otlp_traces_endpoint")
    if endpoint != IN_PROCESS_ENDPOINT:
        return wrapped(*args, **kwargs)
    name = str(args[0] if args else kwargs.get("instrumenting_module_name", "vllm"))
    tracer = safe(_engine_tracer, name)
    return tracer


def _engine_tracer(name: str) -> Any:
    from opentelemetry import trace

    provider = trackers.current().runtime.engine_provider()
    if provider is None:
        return None
    # vLLM makes its request spans on the global tracer provider (vllm.tracing.instrument_manual)
    trace.set_tracer_provider(provider)
    if trace.get_tracer_provider() is not provider:
        warn_once(
            "engine-global",
            "another tracer provider is set in the rollout server: vLLM's request spans go there, not to verl-otel",
        )
    return provider.get_tracer(name)


_takes_trace_headers: dict[Any, bool] = {}


def _trace_headers(engine: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    params: Any = args[1] if len(args) > 1 else kwargs.get("sampling_params")
    extra = getattr(params, "extra_args", None)
    if not isinstance(extra, dict) or _KEY not in extra:
        return None
    tp = extra.pop(_KEY)  # vLLM's own request no longer carries our key
    if not extra:
        params.extra_args = None
    if kwargs.get("trace_headers") is not None or not tp:
        return None
    if getattr(getattr(engine, "observability_config", None), "otlp_traces_endpoint", None) is None:
        return None  # this engine's tracing is off (vLLM would warn about the headers)
    fn = type(engine).generate
    takes = _takes_trace_headers.get(fn)
    if takes is None:
        takes = _takes_trace_headers[fn] = "trace_headers" in inspect.signature(fn).parameters
        if not takes:
            warn_once(
                "engine-trace-headers",
                "this vLLM's AsyncLLM.generate takes no trace_headers: no engine "
                "spans under the samples (training continues)",
            )
    if not takes:
        return None
    from verl_otel.telemetry.propagation import to_headers

    return {**kwargs, "trace_headers": to_headers(str(tp))}  # traceparent, tracestate, baggage (propagation.py)


async def _flushed_after(outputs: Any, traceparent: str | None = None) -> Any:
    """vLLM ends its span as the request finishes; ask for an export then (not up to a second later on the
    batch processor's schedule): a rollout server is killed, not shut down, when the run ends. The request
    is watched for a stall meanwhile."""
    from verl_otel.hooks.stall_watch import unwatch, watch

    token = safe(watch, sc.CALL_SERVER_REQUEST, traceparent)
    try:
        async for output in outputs:
            yield output
    finally:
        safe(unwatch, token)
        safe(trackers.current().services.flush_soon)


def engine_generate(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    new = safe(_trace_headers, instance, args, kwargs)
    if new is None:
        return wrapped(*args, **kwargs)
    return _flushed_after(wrapped(*args, **new), new["trace_headers"].get("traceparent"))
