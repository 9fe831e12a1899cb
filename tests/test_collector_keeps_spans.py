"""The Collector as users deploy it (deploy/otel-collector), with the real Collector and Jaeger of `make stack-bin`
run by verl_otel.native on free ports: what a Collector acknowledged survives its SIGKILL (the gateway, config.yaml,
killed while Jaeger is down; an agent, agent.yaml, killed while the gateway is down), and an agent forwards both
signals through the gateway into Jaeger and Prometheus' scrape. Seconds per test: no verl run."""

from __future__ import annotations

import time
from typing import Any

from helpers.procs import ROOT
from helpers.real_stack import go_binaries, scrape, wait_until

from verl_otel.analysis.jaeger import JaegerClient
from verl_otel.native import Binds, Ports, Stack
from verl_otel.native.agent import Agent, AgentPorts

SERVICE = "verl-otel-collector-check"


def _spans(count: int, name: str) -> list[Any]:
    """``count`` ended spans of one trace, made by the SDK as a process makes them."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    kept = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("collector-check")
    with tracer.start_as_current_span(name):
        for i in range(count - 1):
            with tracer.start_as_current_span(f"{name}-{i}"):
                pass
    provider.shutdown()
    return list(kept.get_finished_spans())


def _send(endpoint: str, spans: list[Any]) -> set[str]:
    """One OTLP export; returns the span ids once the Collector acknowledged them (its answer was success)."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=20)
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS, f"{endpoint} did not acknowledge"
    finally:
        exporter.shutdown()
    return {format(s.context.span_id, "016x") for s in spans}


def _in_jaeger(stack: Stack) -> set[str]:
    now = time.time_ns()
    try:
        spans = JaegerClient(stack.jaeger_url, timeout_s=10).find_traces(
            SERVICE, now - 3600 * 10**9, now + 60 * 10**9, operation="", limit=1000
        )
    except OSError:
        return set()
    return {s.span_id for s in spans}


def _arrived(stack: Stack, sent: set[str], timeout: float = 120) -> None:
    """Every span of ``sent`` in Jaeger within ``timeout`` (the exporters retry with backoff)."""
    assert wait_until(lambda: sent <= _in_jaeger(stack), timeout=timeout, every=2), (
        f"{len(sent - _in_jaeger(stack))} of {len(sent)} acknowledged spans never reached Jaeger"
    )


def _stop_all(stack: Stack) -> None:
    for name in list(stack.pids):
        stack.stop(name)


def test_the_gateway_killed_right_after_acknowledging_loses_no_span(tmp_path):
    """Jaeger down: the spans the Collector acknowledged can only be in its queue when it is killed (SIGKILL, at
    once after the answer); started again on the same queue folder (and stopped cleanly once more, still without
    Jaeger), it sends every one. A `batch` processor in
    front of the queue (this file's config before) loses them all: it holds a batch for up to 5s in memory."""
    bins = go_binaries()
    stack = Stack(tmp_path / "head", Ports.free(), Binds())
    try:
        stack.start("collector", ROOT, bins)  # no Jaeger yet: its OTLP port refuses
        sent = _send(stack.otlp_endpoint, _spans(40, "before-kill")) | _send(stack.otlp_endpoint, _spans(9, "two"))
        stack.stop("collector", crash=True)
        stack.start("collector", ROOT, bins)
        stack.stop("collector")  # and a clean stop (docker compose restart): the batcher hands its spans back
        stack.start("collector", ROOT, bins)
        stack.start("jaeger", ROOT, bins)
        _arrived(stack, sent)
    finally:
        _stop_all(stack)


def _pushed_metric(endpoint: str) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=endpoint, insecure=True, timeout=20), export_interval_millis=3_600_000
    )
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": SERVICE}))
    provider.get_meter("collector-check").create_counter("verl_otel_agent_check").add(3)
    try:
        assert provider.force_flush(30_000), "the agent did not take the metric"
    finally:
        provider.shutdown()


def test_an_agent_forwards_through_the_gateway_and_keeps_what_it_acknowledged(tmp_path):
    """A node's agent (agent.yaml: the gateway's address in VERL_OTEL_GATEWAY_ENDPOINT) in front of the gateway:
    spans reach Jaeger and metrics the gateway's Prometheus endpoint; with the gateway down, spans the agent
    acknowledged survive its SIGKILL and arrive once both are back."""
    bins = go_binaries()
    head = Stack(tmp_path / "head", Ports.free(), Binds())
    agent = Agent(tmp_path / "node", gateway=f"127.0.0.1:{head.ports.otlp_grpc}", ports=AgentPorts.free())
    try:
        head.start("jaeger", ROOT, bins)
        head.start("collector", ROOT, bins)
        agent.start(bins["collector"], ROOT)
        first = _send(agent.otlp_endpoint, _spans(20, "through-agent"))
        _pushed_metric(agent.otlp_endpoint)
        _arrived(head, first, timeout=60)
        exposed = f"http://127.0.0.1:{head.ports.collector_metrics}/metrics"
        assert wait_until(lambda: "verl_otel_agent_check" in scrape(exposed), timeout=30), scrape(exposed)[-2000:]

        head.stop("collector")  # the gateway away (a restart, the head's network)
        second = _send(agent.otlp_endpoint, _spans(30, "while-gateway-down"))
        agent.stop(crash=True)
        head.start("collector", ROOT, bins)
        agent.start(bins["collector"], ROOT)  # the same queue folder
        _arrived(head, first | second)
    finally:
        agent.stop()
        _stop_all(head)
