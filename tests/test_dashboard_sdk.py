"""The dashboards' JSON is grafana-foundation-sdk's (Grafana 11.4's typed model): read back through the SDK's model
it comes out unchanged, but for the raw parts builders.py declares (the Jaeger query, the Prometheus annotation's
formats). Also what the declarative layer hands the SDK beyond panels.py's use: extra variables, unplaced panels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grafana_foundation_sdk.cog import runtime
from grafana_foundation_sdk.models import bargauge, prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.models import dashboard as dm

from verl_otel.dashboards import builders, grafana, panels

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def typed_runtime():
    """Panel options, field configs and Prometheus queries decode into their typed models (else they stay dicts
    and any key would survive the round trip)."""
    for mod in (timeseries, stat, bargauge, table, statetimeline):
        runtime.register_panelcfg_variant(mod.variant_config())
    runtime.register_dataquery_variant(prometheus.variant_config())


def _strip_raw_annotation_keys(doc: dict) -> dict:
    out = json.loads(json.dumps(doc))
    for ann in out["annotations"].get("list", []):  # a dashboard without annotations has none
        for k in builders.PROM_ANNOTATION_RAW:
            ann.pop(k)
    return out


@pytest.mark.parametrize("dash", panels.DASHBOARDS, ids=lambda d: d.uid)
def test_committed_json_is_the_sdk_model_but_for_the_declared_raw_parts(dash, typed_runtime):
    doc = json.loads((ROOT / "grafana" / f"{dash.uid}.json").read_text())
    model = dm.Dashboard.from_json(doc)
    assert builders.plain(model) == _strip_raw_annotation_keys(doc), "a key the SDK's model does not know"
    queries = [t for p in model.panels or [] for t in p.targets or []]
    raw = [q for q in queries if isinstance(q, runtime.UnknownDataquery)]
    assert all(isinstance(q, prometheus.Dataquery) for q in queries if q not in raw)
    assert [q.data["datasource"]["type"] for q in raw] == ["jaeger"] * len(raw), "only the Jaeger search is raw"
    assert len(raw) == sum(p.kind == "traces-table" for p in dash.panels)
    assert all(
        isinstance(
            p.options, (timeseries.Options, stat.Options, bargauge.Options, table.Options, statetimeline.Options)
        )
        for p in model.panels or []
    )


def _panel(pid: int, grid: tuple[int, int, int, int] = (0, 0, 12, 8)) -> grafana.Panel:
    return grafana.Panel(f"p{pid}", "A panel. Healthy: yes.", "timeseries", (grafana.Target("up"),), grid=grid, id=pid)


def test_extra_variables_are_typed_or_refused():
    custom = {"name": "phase", "type": "custom", "query": "gen,update_actor", "multi": True, "includeAll": True}
    d = grafana.Dashboard("x", "x", "x", (_panel(1),), extra_vars=(custom,))
    (var,) = [v for v in builders.render(d)["templating"]["list"] if v["name"] == "phase"]
    assert {k: var[k] for k in custom} == custom
    with pytest.raises(ValueError, match="definition"):
        builders.render(grafana.Dashboard("x", "x", "x", (_panel(1),), extra_vars=({**custom, "definition": "x"},)))


def test_panels_left_at_the_origin_are_placed_by_the_sdk():
    d = grafana.Dashboard("x", "x", "x", (_panel(1), _panel(2), _panel(3, (0, 0, 24, 4)), _panel(4, (12, 20, 12, 8))))
    grids = [(p["gridPos"]["x"], p["gridPos"]["y"], p["gridPos"]["w"]) for p in builders.render(d)["panels"]]
    assert grids == [(0, 0, 12), (12, 0, 12), (0, 8, 24), (12, 20, 12)]


def test_rows_number_and_place_their_panels():
    """A dashboard's rows give its panels their ids (1, 2, ... in order) and grid positions (side by side in equal
    widths, each row below the one before), so a panel added to a row moves the ones after it, not a hand-set
    number in another file."""
    a, b, c = (grafana.Panel(t, "A panel. Healthy: yes.", "timeseries", (grafana.Target("up"),)) for t in "abc")
    laid = grafana.laid_out((grafana.Row(4, a, b), grafana.Row(6, c)))
    assert [(p.title, p.id, p.grid) for p in laid] == [
        ("a", 1, (0, 0, 12, 4)),
        ("b", 2, (12, 0, 12, 4)),
        ("c", 3, (0, 4, 24, 6)),
    ]
    for dash in panels.DASHBOARDS:
        assert [p.id for p in dash.panels] == list(range(1, len(dash.panels) + 1)), dash.uid
        rows: dict[int, list[tuple[int, int, int, int]]] = {}
        for p in dash.panels:
            rows.setdefault(p.grid[1], []).append(p.grid)
        y = 0
        for top, grids in rows.items():  # each row fills the width, the next starts where it ends
            assert top == y and [g[0] for g in grids] == [sum(g[2] for g in grids[:i]) for i in range(len(grids))]
            assert sum(g[2] for g in grids) == grafana.GRID_COLUMNS and len({g[3] for g in grids}) == 1, grids
            y += grids[0][3]
    with pytest.raises(AssertionError):
        grafana.Row(8, a, b, c, a, b, c, a)  # 7 panels cannot share 24 columns equally
