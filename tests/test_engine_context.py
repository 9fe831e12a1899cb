"""The sample's context for the inference engine's request span (no engine needed here; the real vLLM run is
tests/test_e2e_vllm.py): the id a sample's requests name as parent is the id of the sample's span, only sampled
traces carry one, and vLLM's own OTLP variable is never taken for the user's collector."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from helpers.procs import clean_env

from verl_otel import _env, config, runtime, trackers
from verl_otel import config as cfg
from verl_otel import semconv as sc
from verl_otel.export.providers import PresetIds, preset_span_id, tracer_provider
from verl_otel.telemetry.engine_context import sample_context
from verl_otel.telemetry.rollout import RolloutTracker
from verl_otel.telemetry.rollout_spans import BatchSpans

TRACE = "0af7651916cd43dd8448eb211c80319c"
SAMPLED = f"00-{TRACE}-b7ad6b7169203331-01"


def test_a_sampled_parent_gives_each_sample_its_own_span_id_in_the_steps_trace():
    a, b = sample_context(SAMPLED), sample_context(SAMPLED)
    assert a and b and a[1] != b[1]
    version, trace_id, span_id, flags = a[0].split("-")
    assert (version, trace_id, flags) == ("00", TRACE, "01") and int(span_id, 16) == a[1] != 0


@pytest.mark.parametrize(
    "parent",
    [
        None,
        "",
        f"00-{TRACE}-b7ad6b7169203331-00",
        f"00-{'0' * 32}-b7ad6b7169203331-01",
        "garbage",
        f"ff-{TRACE}-b7ad6b7169203331-01",
        f"00-{TRACE}-b7ad6b716920333z-0g",
    ],
)
def test_no_context_for_unsampled_or_unreadable_parents(parent):
    assert sample_context(parent) is None


def test_preset_id_is_used_once():
    provider = TracerProvider(id_generator=PresetIds())
    tracer = provider.get_tracer("t")
    with preset_span_id(0x1234):
        first = tracer.start_span("a")
        second = tracer.start_span("b")
    third = tracer.start_span("c")
    assert first.get_span_context().span_id == 0x1234
    assert second.get_span_context().span_id not in (0, 0x1234) and third.get_span_context().span_id != 0x1234


def test_our_provider_names_sample_spans_as_their_requests_did(tmp_path):
    """The real chain: a finished sample whose requests named span id X becomes the rollout.sample span X."""
    mem = InMemorySpanExporter()
    provider, _ = tracer_provider(config.load({sc.ENV_DIR: str(tmp_path)}, report=False), _resource(), _no_drop)
    provider.add_span_processor(SimpleSpanProcessor(mem))
    runtime.reset_for_tests()
    runtime.configure(tracer_provider=provider)
    try:
        tracker = RolloutTracker()
        tracker.on_batch_done.append(BatchSpans(trackers.current().services, max_sample_spans=8).done)
        tracker.batch_started("train", 1, 2, SAMPLED)
        ctx = sample_context(SAMPLED)
        assert ctx is not None
        tracker.sample_finished(
            "train", tracker.sample_started("train"), {"step": 1, sc.SAMPLE_SPAN_ID_KEY: ctx[1]}, None
        )
        tracker.sample_finished("train", tracker.sample_started("train"), {"step": 1}, None)
        samples = [s for s in mem.get_finished_spans() if s.name == sc.SPAN_ROLLOUT_SAMPLE]
        assert len(samples) == 2 and ctx[1] in {s.context.span_id for s in samples}
        assert all(format(s.context.trace_id, "032x") == TRACE for s in samples)
    finally:
        runtime.reset_for_tests()


def test_engine_provider_records_children_of_sampled_contexts_only(tmp_path):
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

    mem = InMemorySpanExporter()
    provider, _ = tracer_provider(
        config.load({sc.ENV_DIR: str(tmp_path)}, report=False), _resource(), _no_drop, children_only=True
    )
    provider.add_span_processor(SimpleSpanProcessor(mem))
    tracer = provider.get_tracer("vllm")
    tracer.start_span("root").end()  # a request that carried no context: no span
    for flags in (TraceFlags.SAMPLED, TraceFlags.DEFAULT):
        parent = SpanContext(int(TRACE, 16), 0xB7AD6B7169203331, is_remote=True, trace_flags=TraceFlags(flags))
        tracer.start_span(sc.SPAN_ENGINE_REQUEST, context=set_span_in_context(NonRecordingSpan(parent))).end()
    assert [s.name for s in mem.get_finished_spans()] == [sc.SPAN_ENGINE_REQUEST]
    assert mem.get_finished_spans()[0].parent.span_id == 0xB7AD6B7169203331


def test_vllms_own_endpoint_variable_is_not_the_users_collector():
    endpoint = "verl-otel:in-process"
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint, sc.ENV_ENGINE_ENDPOINT: endpoint}
    assert _env.mode(env) == _env.MODE_OFF
    assert _env.enabled({**env, sc.ENV_ENABLED: "1"})
    settings = config.load({**env, sc.ENV_ENABLED: "1"}, report=False)
    assert settings.traces_endpoint is None and not settings.problems and settings.embedded
    user = {**env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317"}  # the user's own: taken
    assert config.load(user, report=False).traces_endpoint == "http://collector:4317"


def test_a_vllm_child_process_starts_nothing_and_says_nothing():
    """vLLM's engine-core process inherits vLLM's OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: the start-up line runs
    (the variable has our prefix), decides off, loads none of our hooks and prints nothing."""
    endpoint = "http://127.0.0.1:4317"
    code = (
        "import sys; import verl_otel.hooks.registry as r; "
        "print(sorted(m for m in sys.modules if m.startswith('verl_otel')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=endpoint, **{sc.ENV_ENGINE_ENDPOINT: endpoint}),
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "verl_otel.hooks.targets" not in proc.stdout, proc.stdout  # install_all was never reached


def _resource():
    from opentelemetry.sdk.resources import Resource

    return Resource.create({})


def _no_drop(_reason: str, _n: int) -> None:
    pass


def test_a_rollout_servers_page_is_listed_in_file_sd_on_the_push_path_too(tmp_path, monkeypatch):
    """vLLM pushes nothing: with a collector configured (no /metrics of ours), the server's own page is still
    listed for a scraper (the stack's pull agent), and taken out at exit."""
    import json

    for key in list(__import__("os").environ):
        if key.startswith(("VERL_OTEL_", "OTEL_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    runtime.reset_for_tests()
    try:
        rt = runtime.current()
        assert rt.settings.prometheus_port is None and rt.settings.traces_endpoint
        labels = {sc.LABEL_PROCESS_ROLE: sc.PROCESS_ROLE_ROLLOUT_SERVER, sc.LABEL_REPLICA: "0"}
        rt.add_scrape_target("127.0.0.1", 40123, labels)
        assert rt.flusher.wait(rt.flusher.request(), 10)
        groups = json.loads((tmp_path / sc.PROM_TARGETS_FILE).read_text())
        assert [(g["targets"], {k: v for k, v in g["labels"].items() if not k.startswith("__")}) for g in groups] == [
            (["127.0.0.1:40123"], {**labels, sc.LABEL_HOST: cfg.hostname()})
        ]
        rt.finish()
        assert json.loads((tmp_path / sc.PROM_TARGETS_FILE).read_text()) == []
    finally:
        runtime.reset_for_tests()


@pytest.mark.parametrize("engine_spans", ["1", "0"])
def test_engine_spans_switch(tmp_path, monkeypatch, engine_spans):
    """VERL_OTEL_ENGINE_SPANS=0: no context leaves the agent loop and vLLM's tracing is left alone (the e2e test
    runs the real server with it on). With it on, tracing never comes without log stats."""
    import argparse
    import os

    from omegaconf import OmegaConf

    from verl_otel.hooks import engine, rollout

    for key in list(os.environ):
        if key.startswith(("VERL_OTEL_", "OTEL_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv(sc.ENV_ENABLED, "1")
    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    monkeypatch.setenv(sc.ENV_PROM_PORT, "")
    monkeypatch.setenv(sc.ENV_ENGINE_SPANS, engine_spans)
    runtime.reset_for_tests()

    class Client:  # what verl's LLMServerClient carries that the hook reads: its (OmegaConf) config
        config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "vllm"}}})

    class Server:  # verl's vLLMHttpServer's attributes the hook reads
        replica_rank, node_rank = 0, 0

    try:
        token = rollout._SAMPLE.set(rollout._SampleCtx(SAMPLED))
        params = {"temperature": 1.0}
        carried = engine._carried(Client(), {"sampling_params": params})
        rollout._SAMPLE.reset(token)
        ns = argparse.Namespace(otlp_traces_endpoint=None, disable_log_stats=True)
        engine._switch_tracing_on(Server(), ns)
        if engine_spans == "1":
            tp = carried["extra_args"][sc.TRACEPARENT_KEY]
            assert tp.split("-")[1] == TRACE and params == {"temperature": 1.0}, "the agent loop's dict is untouched"
            assert (ns.otlp_traces_endpoint, ns.disable_log_stats) == (engine.IN_PROCESS_ENDPOINT, False)
            assert os.environ.get(sc.ENV_ENGINE_ENDPOINT) == engine.IN_PROCESS_ENDPOINT
        else:
            assert carried is None
            assert (ns.otlp_traces_endpoint, ns.disable_log_stats) == (None, True)
        user = argparse.Namespace(otlp_traces_endpoint="http://collector:4317", disable_log_stats=True)
        engine._switch_tracing_on(Server(), user)  # the user's own vLLM tracing: kept, with the stats it needs
        assert (user.otlp_traces_endpoint, user.disable_log_stats) == ("http://collector:4317", False)
    finally:
        os.environ.pop(sc.ENV_ENGINE_ENDPOINT, None)
        runtime.reset_for_tests()
