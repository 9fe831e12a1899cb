"""The generated dashboards: committed JSON == generator, structure Grafana 10-12 imports, every metric and label
from semconv (or a listed external exporter), and every expression evaluated by a real Prometheus on data."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import time
import urllib.parse
from pathlib import Path

import pytest

from helpers.prom import MetricsEndpoint, PromServer, available
from helpers.synthetic_metrics import exposition

from verl_otel import semconv as sc
from verl_otel.dashboards import alerts, all_expressions, build, builders, concrete, grafana, panels

ROOT = Path(__file__).resolve().parents[1]
VARIABLES = {"datasource", "jaeger", "project", "experiment", "instance", "service"}


def _doc(uid: str) -> dict:
    return json.loads((ROOT / "grafana" / f"{uid}.json").read_text())


def test_committed_files_equal_the_generator_output():
    assert build.main(["--check"]) == 0, "run `python -m verl_otel.dashboards.build` and commit"
    assert sorted(p.name for p in (ROOT / "grafana").glob("*.json")) == sorted(
        f"{d.uid}.json" for d in panels.DASHBOARDS
    ), "a dashboard JSON without a generator (or the reverse)"


def test_check_reports_drift(tmp_path, capsys):
    for rel in build.outputs():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    assert build.main(["--check", "--root", str(tmp_path)]) == 0
    path = tmp_path / "grafana" / f"{panels.PROGRESS.uid}.json"
    path.write_text(path.read_text().replace("Run progress", "Run progres"))
    assert build.main(["--check", "--root", str(tmp_path)]) == 1
    assert "verl-training-progress.json" in capsys.readouterr().err


@pytest.mark.parametrize("dash", panels.DASHBOARDS, ids=lambda d: d.uid)
def test_dashboard_structure(dash):
    doc = _doc(dash.uid)
    assert doc["uid"] == dash.uid and doc["title"] and doc["schemaVersion"] == 39
    assert {v["name"] for v in doc["templating"]["list"]} == VARIABLES | {v["name"] for v in dash.extra_vars}
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for p in doc["panels"]:
        assert p["description"].strip().endswith("."), f"{p['title']}: one sentence on what healthy looks like"
        assert "healthy" in p["description"].lower() or p["type"] == "stat", p["title"]
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["datasource"]["type"] == "prometheus":
            assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]
            assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])


def test_every_panel_constant_has_title_unit_and_description():
    for dash in panels.DASHBOARDS:
        for p in dash.panels:
            assert p.title and p.unit and len(p.description) > 40, p
            assert p.kind == "traces-table" or p.targets, p.title


def test_no_template_leftovers():
    """Only defined variables and Grafana built-ins; no Python format fields or reprs left in the JSON."""
    for dash in panels.DASHBOARDS:
        text = (ROOT / "grafana" / f"{dash.uid}.json").read_text()
        defined = VARIABLES | {v["name"] for v in dash.extra_vars}
        for ref in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text):
            assert ref in defined or ref in grafana.GRAFANA_BUILTINS, f"{dash.uid}: undefined variable ${ref}"
        for t in (t for p in dash.panels for t in p.targets):
            assert not re.search(r"(?<!\{)\{[A-Za-z_][A-Za-z0-9_.]*\}(?!\})", t.expr), t.expr  # {FILTERS}
            assert "None" not in t.expr and "sc." not in t.expr and "  " not in t.expr, t.expr
            assert not re.search(r"\{\{(?!\s*[A-Za-z_][A-Za-z0-9_]*\s*\}\})", t.legend), t.legend


def test_every_verl_query_carries_the_dashboard_filters():
    for dash in panels.DASHBOARDS:
        for p in dash.panels:
            for t in p.targets:
                metrics, _ = _names_and_labels(t.expr)
                for name in metrics - set(sc.EXTERNAL_METRICS):
                    for sel in re.finditer(rf"(?<![\w\"]){name}\b(\{{[^}}]*\}})?", t.expr):
                        matchers = sel[1] or ""
                        assert any(f in matchers for f in dash.filters), f"{p.title}: {sel[0]} ignores the run filters"


_FUNCTIONS = {
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "topk",
    "bottomk",
    "quantile",
    "by",
    "on",
    "and",
    "or",
    "unless",
    "without",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "rate",
    "irate",
    "increase",
    "delta",
    "deriv",
    "changes",
    "resets",
    "time",
    "histogram_quantile",
    "clamp_min",
    "clamp_max",
    "abs",
    "max_over_time",
    "min_over_time",
    "avg_over_time",
    "quantile_over_time",
    "sum_over_time",
    "count_over_time",
    "absent",
    "label_replace",
    "e",
}
_LABELS = {lbl for m in sc.METRICS for lbl in m.labels} | {
    "le",
    "instance",
    "job",
    sc.LABEL_PROJECT,
    sc.LABEL_EXPERIMENT,
    sc.LABEL_PROCESS_ROLE,
    "gpu",
    "Hostname",
    "exporter",
    "alertstate",
    sc.LABEL_REPLICA,
}


def _names_and_labels(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, grouping/matching labels) of a PromQL expression."""
    labels: set[str] = set()
    for group in re.findall(r"\b(?:by|on|without|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        labels |= {s.strip() for s in group.split(",") if s.strip()}
    stripped = re.sub(r"\b(?:by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    stripped = re.sub(r'"[^"]*"', '""', stripped)
    for matchers in re.findall(r"\{([^}]*)\}", stripped):
        labels |= set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    stripped = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", stripped)
    idents = set(re.findall(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", stripped)) - _FUNCTIONS
    return idents, labels - {"__name__"}


def test_every_metric_and_label_is_semconv_or_a_listed_external():
    names = {m.name for m in sc.METRICS} | set(sc.RECORDED)  # the recording rules' (deploy/prometheus/rules)
    names |= {f"{m.name}_{s}" for m in sc.METRICS if m.kind == "histogram" for s in ("bucket", "sum", "count")}
    for where, expr, _ in all_expressions():
        metrics, labels = _names_and_labels(expr)
        unknown = metrics - names - set(sc.EXTERNAL_METRICS)
        assert not unknown, f"{where}: {unknown} is neither in verl_otel.semconv nor in EXTERNAL_METRICS"
        assert labels <= _LABELS, f"{where}: unknown labels {labels - _LABELS}"
    used = {n for _, e, _ in all_expressions() for n in _names_and_labels(e)[0]}
    assert used & set(sc.EXTERNAL_METRICS) == set(sc.EXTERNAL_METRICS), "unused EXTERNAL_METRICS entry"


def test_all_expressions_lists_every_query_variable_and_rule():
    exprs = all_expressions()
    n_targets = sum(len(p.targets) for d in panels.DASHBOARDS for p in d.panels)
    n_vars = len(panels.DASHBOARDS) * sum(1 for v in builders.variables() if v["type"] == "query")
    n_vars += sum(1 for d in panels.DASHBOARDS for v in d.extra_vars if v["type"] == "query")
    n_annotations = sum(len(d.annotations) for d in panels.DASHBOARDS)
    assert n_annotations and len(exprs) == n_targets + n_vars + n_annotations + len(alerts.rules())
    assert len({w for w, _, _ in exprs}) == len(exprs), "where-names must be unique"
    for where, expr, reason in exprs:
        assert reason is None or reason.strip(), where
        assert not re.search(r"\$(?!\d)", concrete(expr)), where  # a label_replace() group ($1) is PromQL's


# -- a real Prometheus, scraping one synthetic target that carries every metric for two runs -----------------------
@pytest.fixture(scope="session")
def prom_with_data(tmp_path_factory):
    if not available():
        pytest.skip("prometheus not installed (`make prometheus` or apt-get install prometheus)")
    scrapes = itertools.count(3)  # counters and gauges move from scrape to scrape: rate() and changes() see it
    workdir = tmp_path_factory.mktemp("prom-dash")
    rules = workdir / "firing.yml"  # an alert firing for run e1, for the ALERTS annotation
    rules.write_text(
        json.dumps(
            {
                "groups": [
                    {
                        "name": "check",
                        "rules": [
                            {
                                "alert": "DashboardCheck",
                                "expr": "vector(1)",
                                "labels": {"severity": "warning", sc.LABEL_PROJECT: "p", sc.LABEL_EXPERIMENT: "e1"},
                            }
                        ],
                    }
                ]
            }
        )
    )
    with MetricsEndpoint(lambda: exposition(step=next(scrapes))) as endpoint:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [{"job_name": "verl", "static_configs": [{"targets": [endpoint.address]}]}],
        }
        with PromServer(workdir, config=config) as prom:
            prom.wait_for('up{job="verl"} == 1')
            time.sleep(3.5)  # a few scrapes, so rate() over the 1m rate interval has two samples
            yield prom


def test_every_dashboard_expression_evaluates_and_returns_data(prom_with_data):
    """Parse errors, evaluation errors (e.g. many-to-many matching) and queries that cannot match the metrics'
    label sets all fail here; Grafana would show them as errors or empty panels."""
    failures = []
    for where, expr, _ in all_expressions():
        if where.startswith("alert/"):
            continue
        try:
            if not prom_with_data.query(concrete(expr)):
                failures.append(f"{where}: no data")
        except ValueError as err:  # Prometheus' own error message
            failures.append(f"{where}: {err}")
    assert not failures, "\n".join(failures)


def test_filters_select_one_run(prom_with_data):
    """The $experiment variable narrows every panel to one run (both runs share one instance, as behind the
    Collector)."""
    for where, expr, _ in all_expressions():
        if where.startswith("alert/") or "$experiment" not in expr:
            continue
        rows = prom_with_data.query(concrete(expr.replace("$experiment", "e1")))
        assert rows, where
        assert {r["metric"].get(sc.LABEL_EXPERIMENT, "e1") for r in rows} == {"e1"}, where


def test_exemplars_are_asked_of_buckets_only():
    """Prometheus stores exemplars with the histogram's _bucket series only: a query on _sum/_count asking for
    them shows no dots."""
    asking = [(p.title, t.expr) for d in panels.DASHBOARDS for p in d.panels for t in p.targets if t.exemplar]
    assert asking, "the step and phase panels link their dots to traces"
    for title, expr in asking:
        metrics, _ = _names_and_labels(expr)
        assert metrics and all(name.endswith("_bucket") for name in metrics), (title, expr)
    for name in ("Step duration", "Phase duration"):
        assert any(title.startswith(name) for title, _ in asking), name


def _jaeger_targets(doc: dict) -> list[dict]:
    return [t for p in doc["panels"] for t in p.get("targets", []) if t["datasource"]["type"] == "jaeger"]


def _explore_queries(doc: dict) -> list[dict]:
    out = []
    for p in doc["panels"]:
        for link in p.get("fieldConfig", {}).get("defaults", {}).get("links", []):
            panes = json.loads(urllib.parse.unquote(link["url"].split("panes=", 1)[1]))
            out += panes["a"]["queries"]
    return out


def test_jaeger_searches_follow_the_run_and_the_service_variable():
    doc = _doc(panels.PROGRESS.uid)
    table = next(p for p in doc["panels"] if p["datasource"]["type"] == "jaeger")
    assert table["repeat"] == "experiment", "Jaeger's tags take no regex: one table per selected experiment"
    (target,) = _jaeger_targets(doc)
    assert target["service"] == "$service" and target["operation"] == sc.SPAN_STEP
    assert target["tags"] == f'{sc.ATTR_EXPERIMENT}="$experiment"'
    (query,) = _explore_queries(doc)
    assert query["service"] == "$service"
    assert query["tags"] == (
        f'{sc.ATTR_PROJECT}="${{__field.labels.{sc.LABEL_PROJECT}}}" '
        f'{sc.ATTR_EXPERIMENT}="${{__field.labels.{sc.LABEL_EXPERIMENT}}}"'
    )
    step_panel = next(p for p in panels.PROGRESS.panels if p.links)
    for t in step_panel.targets:  # the link reads the clicked line's run labels: every line must carry them
        assert f"by ({sc.LABEL_PROJECT}, {sc.LABEL_EXPERIMENT}" in t.expr, t.expr
    service = next(v for v in doc["templating"]["list"] if v["name"] == "service")
    assert service["type"] == "textbox" and service["current"]["value"] == sc.SERVICE_NAME_DEFAULT
    assert '"service": "verl"' not in json.dumps(doc["panels"]), "no hard-coded service left"


def test_both_dashboards_annotate_firing_alerts_and_validation_runs(prom_with_data):
    for dash in (panels.PROGRESS, panels.HEALTH):  # the run-against-run dashboard has no time axis
        doc = _doc(dash.uid)
        ann = {a["name"]: a for a in doc["annotations"]["list"]}
        assert set(ann) == {"Alerts firing", "Validation runs", "Captures"}
        assert all(a["datasource"] == grafana.PROM_DS and a["enable"] for a in ann.values())
    alerts_expr = next(a.expr for a in panels.ANNOTATIONS if a.name == "Alerts firing")
    rows = prom_with_data.query(concrete(alerts_expr.replace("$experiment", "e2")))
    assert rows == [], "an alert of run e1 is not drawn on run e2"
    rows = prom_with_data.query(concrete(alerts_expr.replace("$experiment", "e1")))
    assert [r["metric"]["alertname"] for r in rows] == ["DashboardCheck"]
    validate = next(a.expr for a in panels.ANNOTATIONS if a.name == "Validation runs")
    assert {r["metric"][sc.LABEL_EXPERIMENT] for r in prom_with_data.query(concrete(validate))} == {"e1", "e2"}
    captured = next(a.expr for a in panels.ANNOTATIONS if a.name == "Captures")
    rows = prom_with_data.query(concrete(captured))
    assert rows and all(sc.LABEL_PHASE in r["metric"] for r in rows), rows  # the title names the phase


def test_validation_panel_shows_both_generations_of_verl_keys(prom_with_data):
    (target,) = next(p for p in panels.HEALTH.panels if p.title == "Validation score").targets
    keys = {r["metric"][sc.LABEL_KEY] for r in prom_with_data.query(concrete(target.expr))}
    assert {"val-core/openai/gsm8k/acc/mean@1", "val/test_score/openai/gsm8k"} <= keys
    assert not {k for k in keys if not k.startswith(("val-core/", "val/test_score/"))}
