"""Dashboard building blocks: panels as module-level constants, rendered to Grafana JSON (schema 39,
importable into Grafana 10-12). Every query gets the dashboard's filters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_otel import semconv as sc

PROM_UID = "verl-prometheus"  # provisioned datasource uids (deploy/grafana/provisioning/datasources)
JAEGER_UID = "verl-jaeger"

#: label matchers every verl query gets; the variables are defined per dashboard
FILTERS = (f'{sc.LABEL_PROJECT}=~"$project", {sc.LABEL_EXPERIMENT}=~"$experiment", instance=~"$instance"')


def m(name: str, extra: str = "") -> str:
    """A selector of ``name`` with the dashboard filters (and ``extra`` matchers)."""
    return f"{name}{{{FILTERS}{', ' + extra if extra else ''}}}"


def key(k: str) -> str:
    """A training curve: ``verl_training_metric`` for verl's key ``k`` (a regex if it has ``|`` or ``*``)."""
    op = "=~" if any(c in k for c in "|*") else "="
    return m(sc.TRAINING_METRIC.name, f'{sc.LABEL_KEY}{op}"{k}"')


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = ""
    exemplar: bool = False
    instant: bool = False
    cpu_empty: str | None = None  # why this query may return nothing in the CPU demo


@dataclass(frozen=True)
class Panel:
    id: int
    title: str
    description: str  # what it shows and what healthy looks like
    kind: str  # timeseries | stat | bargauge | table | traces-table
    targets: tuple[Target, ...]
    unit: str = "short"
    grid: tuple[int, int, int, int] = (0, 0, 12, 8)  # x, y, w, h
    stacked: bool = False
    max: float | None = None
    cpu_empty: str | None = None  # why this may show nothing in the CPU demo
    links: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    tags: tuple[str, ...] = ("verl", "verl-otel")
    refresh: str = "10s"
    extra_vars: tuple[dict[str, Any], ...] = field(default=())

    def __post_init__(self) -> None:
        ids = [p.id for p in self.panels]
        assert len(ids) == len(set(ids)), f"{self.uid}: duplicate panel ids"


def _variable(name: str, label: str, query: str, regex_all: bool = True) -> dict[str, Any]:
    return {
        "name": name, "label": label, "type": "query", "datasource": {"type": "prometheus", "uid": PROM_UID},
        "query": {"query": query, "refId": f"var-{name}"}, "definition": query, "refresh": 2,
        "includeAll": True, "multi": True, "allValue": ".*" if regex_all else None,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "sort": 1,
    }


def variables() -> list[dict[str, Any]]:
    step = sc.TRAINING_STEP.name
    return [
        _variable("project", "project", f"label_values({step}, {sc.LABEL_PROJECT})"),
        _variable("experiment", "experiment", f'label_values({step}{{{sc.LABEL_PROJECT}=~"$project"}}, '
                                              f"{sc.LABEL_EXPERIMENT})"),
        _variable("instance", "instance", f"label_values({sc.ROLLOUT_SAMPLES_EXPECTED.name}, instance)"),
    ]


def _field_config(p: Panel) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": p.unit, "color": {"mode": "palette-classic"}}
    if p.kind == "timeseries":
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 30 if p.stacked else 0,
                              "showPoints": "auto", "stacking": {"mode": "normal" if p.stacked else "none"}}
    if p.kind == "bargauge":
        defaults["min"] = 0
        defaults["color"] = {"mode": "continuous-GrYlRd"} if p.unit != "percentunit" else {"mode": "thresholds"}
        defaults["thresholds"] = {"mode": "absolute", "steps": [{"color": "blue", "value": None}]}
    if p.max is not None:
        defaults["max"] = p.max
    if p.links:
        defaults["links"] = list(p.links)
    return {"defaults": defaults, "overrides": []}


def _options(p: Panel) -> dict[str, Any]:
    if p.kind == "bargauge":
        return {"orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True,
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    if p.kind == "stat":
        return {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "textMode": "value_and_name", "colorMode": "value", "graphMode": "none"}
    if p.kind == "timeseries":
        return {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                "tooltip": {"mode": "multi", "sort": "desc"}}
    return {"showHeader": True}


def render_panel(p: Panel) -> dict[str, Any]:
    x, y, w, h = p.grid
    if p.kind == "traces-table":  # a Jaeger search: the slowest recent step traces, each a link
        return {
            "id": p.id, "type": "table", "title": p.title, "description": p.description,
            "gridPos": {"x": x, "y": y, "w": w, "h": h},
            "datasource": {"type": "jaeger", "uid": JAEGER_UID},
            "targets": [{"refId": "A", "datasource": {"type": "jaeger", "uid": JAEGER_UID}, "queryType": "search",
                         "service": sc.SERVICE_NAME_DEFAULT, "operation": sc.SPAN_STEP, "limit": 20}],
            "options": {"showHeader": True, "sortBy": [{"displayName": "Duration", "desc": True}]},
            "fieldConfig": {"defaults": {}, "overrides": []},
        }
    targets = []
    for i, t in enumerate(p.targets):
        targets.append({"refId": chr(ord("A") + i), "datasource": {"type": "prometheus", "uid": PROM_UID},
                        "expr": t.expr, "legendFormat": t.legend or "__auto", "exemplar": t.exemplar,
                        "instant": t.instant or p.kind in ("bargauge", "stat", "table"),
                        "range": not (t.instant or p.kind in ("bargauge", "stat", "table"))})
    return {
        "id": p.id, "type": "table" if p.kind == "table" else p.kind, "title": p.title, "description": p.description,
        "gridPos": {"x": x, "y": y, "w": w, "h": h}, "datasource": {"type": "prometheus", "uid": PROM_UID},
        "targets": targets, "fieldConfig": _field_config(p), "options": _options(p),
    }


def render(d: Dashboard) -> dict[str, Any]:
    return {
        "uid": d.uid, "title": d.title, "description": d.description, "tags": list(d.tags),
        "schemaVersion": 39, "version": 1, "editable": True, "graphTooltip": 1, "refresh": d.refresh,
        "time": {"from": "now-3h", "to": "now"}, "timezone": "browser",
        "templating": {"list": variables() + list(d.extra_vars)},
        "annotations": {"list": []},
        "links": [{"title": "verl-otel dashboards", "type": "dashboards", "tags": ["verl-otel"], "asDropdown": True}],
        "panels": [render_panel(p) for p in d.panels],
    }
