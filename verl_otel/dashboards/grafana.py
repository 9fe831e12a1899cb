"""Dashboard building blocks: panels as module-level constants, rendered to Grafana JSON (schema 39,
importable into Grafana 10-12). Every query gets the dashboard's filters."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from verl_otel import semconv as sc

PROM_UID = "verl-prometheus"  # provisioned datasource uids (deploy/grafana/provisioning/datasources)
JAEGER_UID = "verl-jaeger"
#: how many recent step traces the "slowest steps" table asks Jaeger for (it sorts them by duration)
SLOW_STEPS_SEARCHED = 100
#: Datasource template variables: the provisioned uids are their defaults, so the stack works as is and
#: the JSON imports into any other Grafana (pick its Prometheus/Jaeger in the drop-downs).
PROM_DS = {"type": "prometheus", "uid": "${datasource}"}
JAEGER_DS = {"type": "jaeger", "uid": "${jaeger}"}
#: Grafana built-ins a dashboard may reference besides its own variables.
GRAFANA_BUILTINS = frozenset({"__rate_interval", "__interval", "__from", "__to", "__all", "__field"})

#: label matchers every verl query gets; the variables are defined per dashboard
FILTERS = (f'{sc.LABEL_PROJECT}=~"$project", {sc.LABEL_EXPERIMENT}=~"$experiment", instance=~"$instance"')
#: what "All" means for each filter variable (all_expressions() substitutes these for a concrete query)
ALL_VALUES = {"$project": ".*", "$experiment": ".*", "$instance": ".*", "$__rate_interval": "1m"}


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
    unit: str | None = None  # overrides the panel's unit for this query (a count beside durations)


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
    repeat: str | None = None  # a variable: one copy of the panel per selected value (vertically)


@dataclass(frozen=True)
class Annotation:
    """A Prometheus annotation: every step at which ``expr`` returns a series marks the time (regions when
    consecutive)."""

    name: str
    expr: str
    title: str  # Grafana legend format ({{label}})
    text: str
    color: str
    cpu_empty: str | None = None  # why it may mark nothing in the CPU demo


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    tags: tuple[str, ...] = ("verl", "verl-otel")
    refresh: str = "10s"
    extra_vars: tuple[dict[str, Any], ...] = field(default=())
    annotations: tuple[Annotation, ...] = ()

    def __post_init__(self) -> None:
        ids = [p.id for p in self.panels]
        assert len(ids) == len(set(ids)), f"{self.uid}: duplicate panel ids"


def _datasource_variable(name: str, label: str, kind: str, uid: str) -> dict[str, Any]:
    return {"name": name, "label": label, "type": "datasource", "query": kind, "regex": "", "hide": 0,
            "includeAll": False, "multi": False, "refresh": 1,
            "current": {"selected": True, "text": label, "value": uid}}  # label = the provisioned name


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name, "label": label, "type": "query", "datasource": PROM_DS,
        "query": {"query": query, "refId": f"var-{name}"}, "definition": query, "refresh": 2,
        "includeAll": True, "multi": True, "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "sort": 1,
    }


def variables() -> list[dict[str, Any]]:
    step = sc.TRAINING_STEP.name
    run = f'{sc.LABEL_PROJECT}=~"$project", {sc.LABEL_EXPERIMENT}=~"$experiment"'
    return [
        _datasource_variable("datasource", "Prometheus", "prometheus", PROM_UID),
        _datasource_variable("jaeger", "Jaeger", "jaeger", JAEGER_UID),
        _variable("project", "project", f"label_values({step}, {sc.LABEL_PROJECT})"),
        _variable("experiment", "experiment", f'label_values({step}{{{sc.LABEL_PROJECT}=~"$project"}}, '
                                              f"{sc.LABEL_EXPERIMENT})"),
        # every verl process of the selected runs (trainer, agent-loop workers, ...), not one kind only
        _variable("instance", "instance", f'label_values({{__name__=~"verl_.+", {run}}}, instance)'),
        # the run's OTEL_SERVICE_NAME, for the Jaeger searches: no metric label carries it on the pull path
        {"name": "service", "label": "Jaeger service", "type": "textbox", "query": sc.SERVICE_NAME_DEFAULT,
         "hide": 0, "current": {"text": sc.SERVICE_NAME_DEFAULT, "value": sc.SERVICE_NAME_DEFAULT},
         "description": "OTEL_SERVICE_NAME of the runs (verl-otel's default: verl)"},
    ]


def jaeger_step_search(experiment: str, project: str | None = None) -> dict[str, Any]:
    """A Jaeger search (tags in logfmt) for one run's step spans under ``$service``; ``experiment`` and ``project``
    are single values: a repeated variable or a field-label reference."""
    tags = f'{sc.ATTR_EXPERIMENT}="{experiment}"'
    if project is not None:
        tags = f'{sc.ATTR_PROJECT}="{project}" {tags}'
    return {"refId": "A", "datasource": JAEGER_DS, "queryType": "search", "service": "$service",
            "operation": sc.SPAN_STEP, "tags": tags, "limit": SLOW_STEPS_SEARCHED}


def explore_link(title: str, queries: list[dict[str, Any]], datasource: str) -> dict[str, Any]:
    """A data link opening Grafana Explore (``panes`` URL of Grafana 10-12) over the panel's time range."""
    pane = {"a": {"datasource": datasource, "queries": queries, "range": {"from": "${__from}", "to": "${__to}"}}}
    return {"title": title, "url": "/explore?schemaVersion=1&panes=" + json.dumps(pane, separators=(",", ":"))}


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
    overrides = [{"matcher": {"id": "byFrameRefID", "options": _ref_id(i)},
                  "properties": [{"id": "unit", "value": t.unit}]}
                 for i, t in enumerate(p.targets) if t.unit is not None]
    return {"defaults": defaults, "overrides": overrides}


def _ref_id(index: int) -> str:
    return chr(ord("A") + index)


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
    repeat = {"repeat": p.repeat, "repeatDirection": "v"} if p.repeat else {}
    if p.kind == "traces-table":  # a Jaeger search: the slowest recent step traces, each a link
        # Jaeger's tag search takes no regex: with a repeat on $experiment each copy has one concrete value
        assert p.repeat == "experiment", "a Jaeger search needs one experiment per panel"
        return {
            "id": p.id, "type": "table", "title": p.title, "description": p.description,
            "gridPos": {"x": x, "y": y, "w": w, "h": h},
            "datasource": JAEGER_DS,
            "targets": [jaeger_step_search("$experiment")],
            "options": {"showHeader": True, "sortBy": [{"displayName": "Duration", "desc": True}]},
            "fieldConfig": {"defaults": {}, "overrides": []}, **repeat,
        }
    targets = []
    for i, t in enumerate(p.targets):
        targets.append({"refId": _ref_id(i), "datasource": PROM_DS,
                        "expr": t.expr, "legendFormat": t.legend or "__auto", "exemplar": t.exemplar,
                        "instant": t.instant or p.kind in ("bargauge", "stat", "table"),
                        "range": not (t.instant or p.kind in ("bargauge", "stat", "table"))})
    return {
        "id": p.id, "type": "table" if p.kind == "table" else p.kind, "title": p.title, "description": p.description,
        "gridPos": {"x": x, "y": y, "w": w, "h": h}, "datasource": PROM_DS,
        "targets": targets, "fieldConfig": _field_config(p), "options": _options(p), **repeat,
    }


def render_annotation(a: Annotation) -> dict[str, Any]:
    return {"name": a.name, "datasource": PROM_DS, "enable": True, "iconColor": a.color, "expr": a.expr,
            "step": "30s", "titleFormat": a.title, "textFormat": a.text, "useValueForTime": False}


def render(d: Dashboard) -> dict[str, Any]:
    return {
        "uid": d.uid, "title": d.title, "description": d.description, "tags": list(d.tags),
        "schemaVersion": 39, "version": 1, "editable": True, "graphTooltip": 1, "refresh": d.refresh,
        "time": {"from": "now-3h", "to": "now"}, "timezone": "browser",
        "templating": {"list": variables() + list(d.extra_vars)},
        "annotations": {"list": [render_annotation(a) for a in d.annotations]},
        "links": [{"title": "verl-otel dashboards", "type": "dashboards", "tags": ["verl-otel"], "asDropdown": True}],
        "panels": [render_panel(p) for p in d.panels],
    }
