"""Dashboard building blocks: panels as module-level constants, declared here as plain dataclasses and rendered to
Grafana JSON (schema 39, importable into Grafana 10-12) by grafana-foundation-sdk's builders (builders.py, imported
only when rendering: declaring panels needs no SDK). Every query gets the dashboard's filters."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
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
GRAFANA_BUILTINS = frozenset({"__rate_interval", "__interval", "__range", "__from", "__to", "__all", "__field"})

#: label matchers every verl query gets; the variables are defined per dashboard
FILTERS = f'{sc.LABEL_PROJECT}=~"$project", {sc.LABEL_EXPERIMENT}=~"$experiment", instance=~"$instance"'
#: what "All" means for each filter variable (all_expressions() substitutes these for a concrete query)
ALL_VALUES = {"$project": ".*", "$experiment": ".*", "$instance": ".*", "$__rate_interval": "1m", "$__range": "1h"}
#: the run-against-run dashboard's two runs (dashboards/compare_panels.py) at "All" too: every run
ALL_VALUES |= {"$baseline": ".*", "$other": ".*"}


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
    title: str
    description: str  # what it shows and what healthy looks like
    kind: str  # timeseries | stat | bargauge | table | traces-table | state-timeline
    targets: tuple[Target, ...]
    unit: str = "short"
    stacked: bool = False
    max: float | None = None
    cpu_empty: str | None = None  # why this may show nothing in the CPU demo
    links: tuple[dict[str, Any], ...] = ()
    repeat: str | None = None  # a variable: one copy of the panel per selected value (vertically)
    mappings: tuple[tuple[str, str, str], ...] = ()  # value -> (text, colour): a Grafana state timeline's values
    # where the dashboard puts it: its rows set both (laid_out); x, y, w, h, and a panel left at x=y=0 is placed by
    # the SDK's dashboard builder after the one before it
    grid: tuple[int, int, int, int] = (0, 0, 12, 8)
    id: int = 0


GRID_COLUMNS = 24  # Grafana's dashboard width


@dataclass(frozen=True, init=False)
class Row:
    """Panels side by side, left to right, sharing the dashboard's width equally, ``height`` grid units high."""

    height: int
    panels: tuple[Panel, ...]

    def __init__(self, height: int, *panels: Panel) -> None:
        assert panels and GRID_COLUMNS % len(panels) == 0, "a row shares the 24 columns equally"
        object.__setattr__(self, "height", height)
        object.__setattr__(self, "panels", panels)


def laid_out(rows: tuple[Row, ...]) -> tuple[Panel, ...]:
    """The rows' panels, numbered 1, 2, ... in order (Grafana's panel ids) and placed: each row below the one
    before it. Adding a panel is adding it to a row; nothing else moves by hand."""
    out: list[Panel] = []
    y = 0
    for row in rows:
        w = GRID_COLUMNS // len(row.panels)
        out += [replace(p, id=len(out) + i + 1, grid=(i * w, y, w, row.height)) for i, p in enumerate(row.panels)]
        y += row.height
    return tuple(out)


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
    # more variables as Grafana JSON, read into the SDK's VariableModel (a key it has no field for is an error)
    extra_vars: tuple[dict[str, Any], ...] = field(default=())
    annotations: tuple[Annotation, ...] = ()
    filters: tuple[str, ...] = (FILTERS,)  # the matchers every verl query carries (one of these)

    def __post_init__(self) -> None:
        ids = [p.id for p in self.panels]
        assert len(ids) == len(set(ids)), f"{self.uid}: duplicate panel ids"


def jaeger_step_search(experiment: str, project: str | None = None) -> dict[str, Any]:
    """A Jaeger search (tags in logfmt) for one run's step spans under ``$service``; ``experiment`` and ``project``
    are single values: a repeated variable or a field-label reference. A raw dict: grafana-foundation-sdk has no
    Jaeger query object (builders.RawQuery passes it through)."""
    tags = f'{sc.ATTR_EXPERIMENT}="{experiment}"'
    if project is not None:
        tags = f'{sc.ATTR_PROJECT}="{project}" {tags}'
    return {
        "refId": "A",
        "datasource": JAEGER_DS,
        "queryType": "search",
        "service": "$service",
        "operation": sc.SPAN_STEP,
        "tags": tags,
        "limit": SLOW_STEPS_SEARCHED,
    }


def explore_link(title: str, queries: list[dict[str, Any]], datasource: str) -> dict[str, Any]:
    """A data link opening Grafana Explore (``panes`` URL of Grafana 10-12) over the panel's time range."""
    pane = {"a": {"datasource": datasource, "queries": queries, "range": {"from": "${__from}", "to": "${__to}"}}}
    return {"title": title, "url": "/explore?schemaVersion=1&panes=" + json.dumps(pane, separators=(",", ":"))}


def ref_id(index: int) -> str:
    """The refId Grafana gives a panel's ``index``-th query (A, B, ...); per-query overrides match on it."""
    return chr(ord("A") + index)
