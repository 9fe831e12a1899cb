"""The deprecation rule (CHANGELOG.md): a renamed label is exported under its old name too, on the same series, for
at least one release (``VERL_OTEL_DEPRECATED_NAMES``, default on), while the dashboards and rules use the new one."""

from __future__ import annotations

import re
import urllib.request

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families

from verl_otel import semconv as sc
from verl_otel.config import load
from verl_otel.dashboards import all_expressions
from verl_otel.export.otel_metrics import start_push
from verl_otel.export.prometheus import serve
from verl_otel.process.metrics import MetricStore
from verl_otel.runtime import Runtime

RENAMED = [m for m in sc.METRICS if m.renamed]


def _store(env: dict[str, str]) -> MetricStore:
    store = Runtime(load(env, report=False)).store
    store.set(sc.ROLLOUT_SAMPLES_COMPLETED, ("3", sc.MODE_TRAIN), 5.0)
    store.set(sc.ASYNC_QUEUE_DEPTH, (sc.PROCESS_ROLE_TRAINER,), 7.0)
    store.add_source(lambda: [(sc.ROLLOUT_TAIL_RATIO, ("1",), 2.5)])  # a live source's readings too
    store.set(sc.UPDATE_EPOCH, ("actor",), 1.0)  # a metric without a rename keeps its labels
    return store


def _scraped(store: MetricStore) -> dict[str, list[dict[str, str]]]:
    port = serve(store, "127.0.0.1", 0)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {f.name: [s.labels for s in f.samples] for f in text_string_to_metric_families(text)}


def _pushed(store: MetricStore) -> dict[str, list[dict[str, str]]]:
    reader = InMemoryMetricReader()
    start_push(store, load({}, report=False), None, given=MeterProvider(metric_readers=[reader]))
    data = reader.get_metrics_data()
    return {
        m.name: [dict(p.attributes) for p in m.data.data_points]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }


def test_the_renames_of_this_release_are_declared():
    assert {m.name for m in RENAMED} == {
        *(m.name for m in sc.METRICS if m.name.startswith("verl_rollout_") and sc.LABEL_ROLLOUT_WORKER in m.labels),
        sc.ASYNC_QUEUE_DEPTH.name,
        sc.ASYNC_PARAM_VERSION.name,
        sc.ASYNC_IDLE_RATIO.name,
    }
    assert sc.ROLLOUT_TAIL_RATIO in RENAMED and sc.ROLLOUT_ETA in RENAMED
    assert {m.renamed for m in RENAMED} == {(("worker", "rollout_worker"),), (("role", "side"),)}


@pytest.mark.parametrize("read", [_scraped, _pushed], ids=["prometheus", "otlp"])
def test_both_label_names_by_default_and_the_old_gone_when_off(read):
    on = read(_store({}))
    off = read(_store({sc.ENV_DEPRECATED_NAMES: "0"}))
    completed = sc.ROLLOUT_SAMPLES_COMPLETED.name
    assert on[completed] == [{"rollout_worker": "3", "worker": "3", "mode": "train"}]  # one series, both names
    assert off[completed] == [{"rollout_worker": "3", "mode": "train"}]
    assert on[sc.ASYNC_QUEUE_DEPTH.name] == [{"side": "trainer", "role": "trainer"}]
    assert off[sc.ASYNC_QUEUE_DEPTH.name] == [{"side": "trainer"}]
    assert on[sc.ROLLOUT_TAIL_RATIO.name] == [{"rollout_worker": "1", "worker": "1"}]
    assert off[sc.ROLLOUT_TAIL_RATIO.name] == [{"rollout_worker": "1"}]
    assert on[sc.UPDATE_EPOCH.name] == off[sc.UPDATE_EPOCH.name] == [{"role": "actor"}]


def test_a_bad_value_keeps_the_default_and_says_so():
    settings = load({sc.ENV_DEPRECATED_NAMES: "maybe"}, report=False)
    assert settings.deprecated_names is True
    assert any(sc.ENV_DEPRECATED_NAMES in p for p in settings.problems)


def test_dashboards_and_rules_use_the_new_names():
    for where, expr, _ in all_expressions():
        for metric in RENAMED:
            if metric.name not in expr:
                continue
            for old, _new in metric.renamed:
                # a label of this metric's selector or of an aggregation over it
                assert not re.search(rf"[{{(,]\s*{old}\s*(=|!=|=~|!~|,|\)|\}})", expr), (where, expr)


@pytest.mark.parametrize(
    ("role", "key"),
    [(sc.PROCESS_ROLE_AGENT_LOOP, sc.RES_ROLLOUT_WORKER_INDEX), (sc.PROCESS_ROLE_ROLLOUT_SERVER, sc.RES_REPLICA_INDEX)],
)
def test_a_process_index_is_named_for_its_role_and_under_the_old_key_for_a_release(role, key):
    """``verl.process.worker_index`` held an agent-loop worker's index or a replica's rank ("worker" is a training
    worker): each has its own key now, the old one goes in the release after 0.1.0."""
    from verl_otel.export.providers import resource

    both = resource(role, 3, {}).attributes
    assert both[key] == 3 and both[sc.RES_DEPRECATED_WORKER_INDEX] == 3
    assert both[sc.RES_INSTANCE].endswith(f"/{role}-3/{both[sc.RES_PID]}")
    new_only = resource(role, 3, {}, deprecated_names=False).attributes
    assert new_only[key] == 3 and sc.RES_DEPRECATED_WORKER_INDEX not in new_only
    assert not {k for k in resource(sc.PROCESS_ROLE_WORKER, None, {}).attributes if "index" in k}


def test_a_lost_workers_run_end_carries_the_old_process_role_key_until_switched_off():
    """The old key `verl_otel.run_end.role` beside `verl_otel.run_end.process_role`, gone with the switch off."""
    from verl_otel.telemetry.run_end import attributes_of

    class ActorDiedError(Exception):  # Ray's, by name and text
        pass

    died = ActorDiedError("The actor died.\n\tclass_name: WorkerDict\n\tpid: 42\n\tip: 10.0.0.7\n")
    on, off = attributes_of(died), attributes_of(died, deprecated_names=False)
    assert on[sc.ATTR_RUN_END_PROCESS_ROLE] == on[sc.ATTR_DEPRECATED_RUN_END_ROLE] == "WorkerDict", on
    assert off[sc.ATTR_RUN_END_PROCESS_ROLE] == "WorkerDict" and sc.ATTR_DEPRECATED_RUN_END_ROLE not in off, off
