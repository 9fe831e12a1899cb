"""The run-against-run dashboard (dashboards/compare_panels.py) on a real Prometheus scraping two runs: ``e1`` the
baseline, ``e2`` whose update_actor is slower (phase histogram and verl's time per token) while its rollout is the
same. Each panel's query, with ``$baseline``/``$other`` set as Grafana sets them, gives each run's medians and the
ratio that names update_actor alone."""

from __future__ import annotations

import itertools
import time

import pytest

from helpers.prom import MetricsEndpoint, PromServer, available

from verl_otel import semconv as sc
from verl_otel.dashboards.compare_panels import COMPARE, MEDIAN, PER_TOKEN

#: phase -> (the bucket each run's observations fall in: (low, high] of DURATION_BUCKETS_S), for e1 and e2
_PHASES = {sc.PHASE_ROLLOUT: ((5, 10), (5, 10)), sc.PHASE_UPDATE_ACTOR: ((10, 20), (20, 30))}
#: verl's timer -> ms per token in e1 and e2
_PER_TOKEN = {"gen": (0.5, 0.5), "update_actor": (1.0, 3.0)}


def _exposition(scrape: int) -> str:
    n = 2 * scrape  # the counters move: increase() over the range sees them
    lines = [f"# TYPE {sc.PHASE_DURATION.name} histogram", f"# TYPE {sc.TRAINING_METRIC.name} gauge"]
    for i, run in enumerate(("e1", "e2")):
        base = f'{sc.LABEL_PROJECT}="p",{sc.LABEL_EXPERIMENT}="{run}"'
        lines.append(f"{sc.TRAINING_STEP.name}{{{base}}} {scrape}")
        for phase, buckets in _PHASES.items():
            low, _ = buckets[i]
            for le in (*sc.PHASE_DURATION.buckets, "+Inf"):
                count = n if le == "+Inf" or float(le) > low else 0
                le_text = le if isinstance(le, str) else f"{le:g}"
                lines.append(f'{sc.PHASE_DURATION.name}_bucket{{{base},phase="{phase}",le="{le_text}"}} {count}')
            lines.append(f'{sc.PHASE_DURATION.name}_count{{{base},phase="{phase}"}} {n}')
        for timer, values in _PER_TOKEN.items():
            key = f"timing_per_token_ms/{timer}"
            lines.append(f'{sc.TRAINING_METRIC.name}{{{base},{sc.LABEL_KEY}="{key}"}} {values[i]}')
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    if not available():
        pytest.skip("prometheus not installed (`make prometheus` or apt-get install prometheus)")
    scrapes = itertools.count(1)
    with MetricsEndpoint(lambda: _exposition(next(scrapes))) as endpoint:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "verl", "static_configs": [{"targets": [endpoint.address]}]}],
        }
        with PromServer(tmp_path_factory.mktemp("prom-compare"), config=config) as prom:
            prom.wait_for('up{job="verl"} == 1')
            time.sleep(3.5)  # a few scrapes: increase() over the range has several samples
            yield prom


def _by_phase(prom, title: str) -> dict[str, float]:
    (panel,) = [p for p in COMPARE.panels if p.title == title]
    (target,) = panel.targets
    expr = target.expr.replace("$project", "p").replace("$baseline", "e1").replace("$other", "e2")
    return {r["metric"][sc.LABEL_PHASE]: float(r["value"][1]) for r in prom.query(expr.replace("$__range", "1m"))}


def test_each_run_s_median_phase_time_side_by_side_and_their_ratio(two_runs):
    assert _by_phase(two_runs, f"{MEDIAN}: baseline run") == pytest.approx({"rollout": 7.5, "update_actor": 15.0})
    assert _by_phase(two_runs, f"{MEDIAN}: other run") == pytest.approx({"rollout": 7.5, "update_actor": 25.0})
    ratio = _by_phase(two_runs, f"{MEDIAN}: other / baseline")
    assert ratio == pytest.approx({"rollout": 1.0, "update_actor": 25.0 / 15.0})


def test_each_run_s_time_per_1k_tokens_side_by_side_and_their_ratio(two_runs):
    assert _by_phase(two_runs, f"{PER_TOKEN}: baseline run") == pytest.approx({"gen": 0.5, "update_actor": 1.0})
    assert _by_phase(two_runs, f"{PER_TOKEN}: other run") == pytest.approx({"gen": 0.5, "update_actor": 3.0})
    assert _by_phase(two_runs, f"{PER_TOKEN}: other / baseline") == pytest.approx({"gen": 1.0, "update_actor": 3.0})


def test_the_run_variables_list_both_runs_of_the_project(two_runs):
    for var in COMPARE.extra_vars:
        selector = var["query"]["query"].removeprefix("label_values(").rsplit(",", 1)[0].replace("$project", "p")
        rows = two_runs.query(f"count by ({sc.LABEL_EXPERIMENT}) ({selector})")
        assert sorted(r["metric"][sc.LABEL_EXPERIMENT] for r in rows) == ["e1", "e2"], var["name"]
