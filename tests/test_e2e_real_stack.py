"""The CPU demo through the real stack (the Collector and Jaeger built by `make stack-bin`, Debian's Prometheus
and Alertmanager, all started by `verl-otel stack up --native`'s code on the very files of deploy/): traces in
Jaeger through a Jaeger crash and a Collector restart, the Collector's real metric names, every dashboard and
alert expression, an exemplar's trace, and an alert that reaches Alertmanager. One run (helpers/real_stack_run.py)
serves every test."""

from __future__ import annotations

import json
import re
import time

import pytest

from helpers.prom import evaluate_every_expression
from helpers.real_stack import wait_until
from helpers.real_stack_run import HUNG_ALERT, SLOW_STEP, STEPS, accepted_spans
from helpers.traces import event_names, steps

from verl_otel import semconv as sc
from verl_otel.analysis.jaeger import JaegerClient
from verl_otel.cli.main import main

pytestmark = pytest.mark.verl


def _jaeger_spans(real) -> list:
    """Every span of the service in Jaeger (an empty operation selects all its traces), each span once."""
    client = JaegerClient(real.stack.jaeger_url)
    now = time.time_ns()
    spans = client.find_traces(sc.SERVICE_NAME_DEFAULT, now - 3600 * 10**9, now, operation="", limit=1000)
    return list({s.span_id: s for s in spans}.values())


def test_the_demo_ran_through_the_stack(real_stack_run):
    assert real_stack_run.run.rc == 0, real_stack_run.run.log_tail()


def test_every_step_trace_is_in_jaeger_with_its_parents(real_stack_run):
    def complete() -> dict:
        by_step = steps(_jaeger_spans(real_stack_run))
        return by_step if sorted(by_step) == list(range(STEPS + 1)) else {}

    by_step = wait_until(complete, timeout=90, every=2)
    assert by_step, sorted(steps(_jaeger_spans(real_stack_run)))
    for number, tree in by_step.items():
        ids = {s.span_id for s in tree.spans}
        assert all(s.parent_id in ids for s in tree.spans if s is not tree.root), f"step {number}: orphans"
        assert {s.trace_id for s in tree.spans} == {tree.root.trace_id}
        if number:  # a trained step: its phases under it, the planted slow one among them
            assert "update_actor" in {s.name for s in tree.spans}, number


def test_every_span_the_collector_accepted_reached_jaeger_through_the_outage(real_stack_run):
    """Jaeger was killed before the run's first span; while it was down the Collector accepted the spans of steps
    0..2 into its disk queue, was killed (SIGKILL) mid-run and started again, and only then Jaeger came back: every
    span either Collector process accepted is in Jaeger."""
    o = real_stack_run.probe.outage
    assert not o.errors and o.jaeger_killed and o.collector_restarted and o.jaeger_restarted, o
    assert o.accepted_before_restart > o.accepted_at_kill, "no span reached the Collector while Jaeger was down"
    accepted = o.accepted_before_restart + accepted_spans(real_stack_run.stack)  # both Collector processes

    def stored() -> int:
        return len(_jaeger_spans(real_stack_run))

    assert wait_until(lambda: stored() >= accepted, timeout=90, every=2), (stored(), accepted)
    ended = [s for s in _jaeger_spans(real_stack_run) if s.name == sc.SPAN_STEP]
    assert any(o.jaeger_killed < s.end_ns / 1e9 < o.collector_restarted for s in ended), "no step ended in the outage"


def test_slow_steps_finds_the_planted_step_in_jaeger(real_stack_run, capsys):
    url = real_stack_run.stack.jaeger_url
    assert main(["slow-steps", "--jaeger", url, "--since", "1h", "--json", "--top", "3"]) == 0
    top = json.loads(capsys.readouterr().out)[0]
    assert top["global_step"] == SLOW_STEP and top["cause"]["phase"] == "update_actor", top


def test_val_generations_reads_validation_samples_from_jaeger(real_stack_run, capsys):
    url = real_stack_run.stack.jaeger_url
    assert main(["val-generations", "--jaeger", url, "--since", "1h", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    spans = _jaeger_spans(real_stack_run)
    events = sum(event_names(s).count("verl.val_generation") for s in spans if s.name == "validate")
    assert events > 0 and len(got) == events


# -- Prometheus, scraping the real Collector ------------------------------------------------------------------------
#: series of job verl that Prometheus makes itself (per target, rule results) and the exporter's resource info
#: metric (OTel's Prometheus compatibility spec): not metrics of ours
NOT_OURS = {"up", "ALERTS", "ALERTS_FOR_STATE", "target_info"}
#: labels the exporter adds to every series besides the resource's: the instrumentation scope
SCOPE_LABELS = {"otel_scope_name", "otel_scope_version", "otel_scope_schema_url"}
#: the resource attributes the Collector's resource/series_labels deletes from metrics (deploy/otel-collector)
DELETED = ("process.", "telemetry.")


def _resource_labels(real) -> set[str]:
    """Label names the run's resource attributes become (resource_to_telemetry_conversion), from Jaeger's spans."""
    keys = {k for s in _jaeger_spans(real) for k in s.resource if not k.startswith(DELETED)}
    return {re.sub(r"[^a-zA-Z0-9_]", "_", k) for k in keys} | {"job", "instance", "le"} | SCOPE_LABELS


BY_NAME = {m.name: m for m in sc.METRICS}


def _base(name: str) -> str:
    return name if name in BY_NAME else re.sub(r"_(bucket|sum|count)$", "", name)


def test_the_collector_makes_exactly_the_semconv_names(real_stack_run):
    series = real_stack_run.prom.api("series", **{"match[]": '{job="verl"}', "start": time.time() - 900})
    series = [s for s in series if s["__name__"] not in NOT_OURS and not s["__name__"].startswith("scrape_")]
    resource = _resource_labels(real_stack_run)
    names = {_base(s["__name__"]) for s in series}
    by_name = BY_NAME
    assert names and names <= set(by_name), sorted(names - set(by_name))
    extra_labels = {}
    for s in series:
        metric = by_name[_base(s["__name__"])]
        # a renamed label is exported under its old name too while its deprecation lasts (CHANGELOG.md)
        extra = set(s) - {"__name__"} - set(metric.labels) - set(metric.deprecated_labels) - resource
        if extra:
            extra_labels[metric.name] = sorted(extra)
    assert not extra_labels, extra_labels
    # every metric the trainer's hooks feed on a v1 run without vLLM got through
    assert {sc.TRAINING_STEP.name, sc.STEP_DURATION.name, sc.PHASE_DURATION.name, sc.PHASE_ACTIVE.name} <= names


def test_every_dashboard_and_alert_expression_evaluates_on_the_real_stack(real_stack_run):
    empty_without_reason, with_data = evaluate_every_expression(real_stack_run.prom)
    assert not empty_without_reason, empty_without_reason
    assert with_data >= 20, with_data


def test_a_step_exemplar_names_a_trace_jaeger_has(real_stack_run):
    prom, now = real_stack_run.prom, time.time()
    rows = prom.api("query_exemplars", query=f"{sc.STEP_DURATION.name}_bucket", start=now - 1800, end=now)
    trace_ids = {e["labels"]["trace_id"] for row in rows for e in row["exemplars"] if "trace_id" in e["labels"]}
    assert trace_ids, rows
    client = JaegerClient(real_stack_run.stack.jaeger_url)
    for trace_id in sorted(trace_ids)[:3]:
        assert any(s.name == sc.SPAN_STEP for s in client.get_trace(trace_id)), trace_id


def test_the_hung_phase_fires_and_reaches_alertmanager(real_stack_run):
    probe = real_stack_run.probe
    assert HUNG_ALERT in probe.prom_firing, sorted(probe.prom_firing)
    alert = probe.am_seen.get(HUNG_ALERT)
    assert alert is not None, sorted(probe.am_seen)
    assert alert["labels"][sc.LABEL_PHASE] == "update_actor" and alert["status"]["state"] == "active", alert
    assert alert["labels"][sc.LABEL_EXPERIMENT] and alert["annotations"]["summary"], alert


def test_the_collectors_own_alerts_evaluate_on_its_real_metrics(real_stack_run):
    from verl_otel.dashboards import alerts

    prom = real_stack_run.prom
    names = set(prom.api("label/__name__/values", **{"match[]": '{job="otel-collector"}'}))
    assert prom.query('up{job="otel-collector"} == 1'), "Prometheus does not scrape the Collector's own metrics"
    group = next(g for g in alerts.rule_groups(alerts.DEFAULTS)["groups"] if g["name"] == "verl-otel-pipeline")
    used = {n for r in group["rules"] for n in re.findall(r"\b(otelcol_[a-z_]+)", r["expr"])}
    assert used, group
    # the names the rules use are the ones this Collector version makes (failure counters appear at the first
    # failure: the Jaeger outage made the exporter's, the receiver's accepted/refused come with the first data)
    made = {n for n in used if n in names}
    assert {n for n in used if "refused" in n} <= made, sorted(used - made)
    for rule in group["rules"]:
        prom.query(rule["expr"])  # evaluates without error


def _exposed(text: str, experiment: str) -> dict[str, set[str]]:
    """metric name -> label names of the exposition's samples of one experiment."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} ", line)
        if m and m[1] not in NOT_OURS and f'{sc.LABEL_EXPERIMENT}="{experiment}"' in m[2]:
            out.setdefault(m[1], set()).update(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m[2]))
    return out


def test_every_semconv_metric_comes_out_of_the_real_collector_as_named(real_stack_run):
    """Every metric (not only those the CPU run feeds), through verl-otel's own OTLP instruments into the real
    Collector: its prometheus exporter's names and labels are semconv's. Last: it adds an experiment of its own."""
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    from helpers.real_stack import scrape

    from verl_otel.config import load
    from verl_otel.export.otel_metrics import start_push
    from verl_otel.process.metrics import MetricStore

    stack, experiment = real_stack_run.stack, "names-check"
    exporter = OTLPMetricExporter(endpoint=f"127.0.0.1:{stack.ports.otlp_grpc}", insecure=True, timeout=10)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    resource = Resource.create(
        {
            "service.name": sc.SERVICE_NAME_DEFAULT,
            "service.instance.id": "check/x/1",
            sc.ATTR_PROJECT: "p",
            sc.ATTR_EXPERIMENT: experiment,
        }
    )
    pushed = {re.sub(r"[^a-zA-Z0-9_]", "_", k) for k in resource.attributes if not k.startswith(DELETED)}
    provider = MeterProvider(metric_readers=[reader], resource=resource)
    state = MetricStore()
    start_push(state, load({}, report=False), resource, given=provider)
    for metric in sc.METRICS:
        labels = tuple(f"v{i}" for i in range(len(metric.labels)))
        if metric.kind == "histogram":
            state.observe(metric, labels, 1.0)
        elif metric.kind == "counter":
            state.inc(metric, labels, 1.0)
        else:
            state.set(metric, labels, 1.0)
    try:
        assert provider.force_flush(30_000)
        url = f"http://127.0.0.1:{stack.ports.collector_metrics}/metrics"
        got = wait_until(lambda: len(_exposed(scrape(url), experiment)) >= len(sc.METRICS), timeout=60)
        exposed = _exposed(scrape(url), experiment)
    finally:
        provider.shutdown()
    assert got, sorted(exposed)
    by_base: dict[str, set[str]] = {}
    for name, labels in exposed.items():
        by_base.setdefault(_base(name), set()).update(labels)
    assert set(by_base) == set(BY_NAME), sorted(set(by_base) ^ set(BY_NAME))
    for name, labels in by_base.items():
        own = {*BY_NAME[name].labels, *BY_NAME[name].deprecated_labels}
        resource = {"job", "instance", "le", *SCOPE_LABELS, *pushed}
        assert own <= labels and labels - own <= resource, (name, sorted(labels - own - resource))
