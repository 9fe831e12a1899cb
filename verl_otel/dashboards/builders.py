"""Our declarative dashboards (grafana.Panel, Target, Annotation, Dashboard) turned into grafana-foundation-sdk
builders (typed classes of Grafana 11.4's dashboard schema), so the JSON is the SDK's.

Raw parts, where the SDK has no typed field (keep this list in step with deploy/README.md):
- the Jaeger search query: the SDK ships no Jaeger dataquery; ``RawQuery`` hands the dict to the SDK's own
  ``UnknownDataquery`` bag;
- the Prometheus annotation's ``titleFormat``/``textFormat``/``step``/``useValueForTime``: the SDK's
  AnnotationQuery types only the fields common to every datasource (``_PromAnnotation`` adds them to its JSON);
- the step panel's Explore link holds a Jaeger query too, inside its URL (plain text to the SDK).
Defaults the SDK's classes add (``transparent``, ``repeatDirection``, stat/bargauge/table options...) are Grafana's
own defaults; it has no ``definition`` for query variables (the query is in ``query.query``) and no ``refresh``
for datasource variables (Grafana lists datasources on every load).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from grafana_foundation_sdk.builders import bargauge, prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import runtime, variants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from verl_otel import semconv as sc
from verl_otel.dashboards import grafana as g

T = TypeVar("T")
#: the Prometheus annotation's keys the SDK's AnnotationQuery has no field for (raw, _PromAnnotation)
PROM_ANNOTATION_RAW = ("step", "titleFormat", "textFormat", "useValueForTime")
_INSTANT_KINDS = ("bargauge", "stat", "table")  # one value per series: Prometheus' instant query
#: the SDK's panel builder per kind (each has .id/.title/...; the base class types none of them)
_PANEL_BUILDERS: dict[str, Any] = {
    "timeseries": timeseries.Panel,
    "stat": stat.Panel,
    "bargauge": bargauge.Panel,
    "table": table.Panel,
    "traces-table": table.Panel,
    "state-timeline": statetimeline.Panel,
}


def plain(obj: Any) -> Any:
    """An SDK object (or a structure of them) as plain JSON values, through the SDK's encoder."""
    return json.loads(json.dumps(obj, cls=JSONEncoder))


def _ref(ds: dict[str, str]) -> dm.DataSourceRef:
    return dm.DataSourceRef(type_val=ds["type"], uid=ds["uid"])


PROM = _ref(g.PROM_DS)
JAEGER = _ref(g.JAEGER_DS)


class RawQuery(cogbuilder.Builder[variants.Dataquery]):
    """A query the SDK has no typed builder for (Jaeger's search), kept as the dict Grafana stores."""

    def __init__(self, query: dict[str, Any]) -> None:
        self._query = query

    def build(self) -> variants.Dataquery:
        return runtime.UnknownDataquery(dict(self._query))


class _PromAnnotation(dm.AnnotationQuery):
    """Prometheus' annotation options besides ``expr``; Grafana reads them from the annotation itself."""

    def __init__(self, extra: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.extra = extra

    def to_json(self) -> dict[str, object]:
        return {**super().to_json(), **self.extra}


class _Built(cogbuilder.Builder[T]):
    """An SDK object made without a builder, where an SDK call takes builders."""

    def __init__(self, obj: T) -> None:
        self._obj = obj

    def build(self) -> T:
        return self._obj


# -- variables ----------------------------------------------------------------------------------------------------
def _datasource_variable(name: str, label: str, kind: str, uid: str) -> db.DatasourceVariable:
    # label = the provisioned datasource's name; its uid is the default, so the stack works as is
    return (
        db.DatasourceVariable(name)
        .label(label)
        .type(kind)
        .regex("")
        .hide(dm.VariableHide.DONT_HIDE)
        .multi(False)
        .include_all(False)
        .current(dm.VariableOption(selected=True, text=label, value=uid))
    )


def _query_variable(name: str, query: str) -> db.QueryVariable:
    return (
        db.QueryVariable(name)
        .label(name)
        .datasource(PROM)
        .query({"query": query, "refId": f"var-{name}"})
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .include_all(True)
        .multi(True)
        .all_value(".*")
        .current(dm.VariableOption(selected=True, text=["All"], value=["$__all"]))
    )


def variable_builders() -> list[cogbuilder.Builder[dm.VariableModel]]:
    step = sc.TRAINING_STEP.name
    run = f'{sc.LABEL_PROJECT}=~"$project", {sc.LABEL_EXPERIMENT}=~"$experiment"'
    return [
        _datasource_variable("datasource", "Prometheus", "prometheus", g.PROM_UID),
        _datasource_variable("jaeger", "Jaeger", "jaeger", g.JAEGER_UID),
        _query_variable("project", f"label_values({step}, {sc.LABEL_PROJECT})"),
        _query_variable("experiment", f'label_values({step}{{{sc.LABEL_PROJECT}=~"$project"}}, {sc.LABEL_EXPERIMENT})'),
        # every verl process of the selected runs (trainer, agent-loop workers, ...), not one kind only
        _query_variable("instance", f'label_values({{__name__=~"verl_.+", {run}}}, instance)'),
        # the run's OTEL_SERVICE_NAME, for the Jaeger searches: no metric label carries it on the pull path
        db.TextBoxVariable("service")
        .label("Jaeger service")
        .hide(dm.VariableHide.DONT_HIDE)
        .default_value(sc.SERVICE_NAME_DEFAULT)
        .current(dm.VariableOption(text=sc.SERVICE_NAME_DEFAULT, value=sc.SERVICE_NAME_DEFAULT))
        .description("OTEL_SERVICE_NAME of the runs (verl-otel's default: verl)"),
    ]


# -- panels -------------------------------------------------------------------------------------------------------
def _prom_query(p: g.Panel, index: int, t: g.Target) -> prometheus.Dataquery:
    q = (
        prometheus.Dataquery()
        .ref_id(g.ref_id(index))
        .datasource(PROM)
        .expr(t.expr)
        .legend_format(t.legend or "__auto")
        .exemplar(t.exemplar)
    )
    return q.instant() if t.instant or p.kind in _INSTANT_KINDS else q.range()


def _link(link: dict[str, Any]) -> db.DashboardLink:
    # Grafana 11's schema types a field's data links as dashboard links: the type/tags it adds are ignored there
    return db.DashboardLink(link["title"]).type(dm.DashboardLinkType.LINK).url(link["url"]).tags([])


def _kind_options(p: g.Panel, b: Any) -> None:
    """The per-type options of the panel builder ``b`` (which the dict ``_PANEL_BUILDERS`` picked for ``p.kind``)."""
    if p.kind == "timeseries":
        b.legend(
            cb.VizLegendOptions()
            .display_mode(cm.LegendDisplayMode.LIST)
            .placement(cm.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        b.tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
        b.draw_style(cm.GraphDrawStyle.LINE).line_width(1).fill_opacity(30 if p.stacked else 0)
        b.show_points(cm.VisibilityMode.AUTO)
        b.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL if p.stacked else cm.StackingMode.NONE))
    elif p.kind in ("stat", "bargauge"):
        b.reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
        if p.kind == "stat":
            b.text_mode(cm.BigValueTextMode.VALUE_AND_NAME).color_mode(cm.BigValueColorMode.VALUE)
            b.graph_mode(cm.BigValueGraphMode.NONE)
        else:
            b.orientation(cm.VizOrientation.HORIZONTAL).display_mode(cm.BarGaugeDisplayMode.GRADIENT)
            b.show_unfilled(True).min(0)
            b.thresholds(
                db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps([dm.Threshold(value=None, color="blue")])
            )
    elif p.kind == "state-timeline":  # one row per series, coloured by its value (p.mappings)
        b.show_value(cm.VisibilityMode.NEVER).merge_values(True).fill_opacity(80).line_width(0)
        b.legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.LIST).placement(cm.LegendPlacement.BOTTOM))
        values = {v: dm.ValueMappingResult(text=t, color=c, index=i) for i, (v, t, c) in enumerate(p.mappings)}
        b.mappings([dm.ValueMap(values)])
    else:
        b.show_header(True)


def _color(p: g.Panel) -> dm.FieldColorModeId:
    if p.kind == "state-timeline":  # each value's own colour (its value mapping)
        return dm.FieldColorModeId.FIXED
    if p.kind == "bargauge":  # a progress bar (percentunit) keeps its threshold colour, durations grade to red
        return dm.FieldColorModeId.THRESHOLDS if p.unit == "percentunit" else dm.FieldColorModeId.CONTINUOUS_GR_YL_RD
    return dm.FieldColorModeId.PALETTE_CLASSIC


def panel_builder(p: g.Panel) -> cogbuilder.Builder[dm.Panel]:
    x, y, w, h = p.grid
    b = (
        _PANEL_BUILDERS[p.kind]()
        .id(p.id)
        .title(p.title)
        .description(p.description)
        .grid_pos(dm.GridPos(x=x, y=y, w=w, h=h))
    )
    if p.repeat:
        b.repeat(p.repeat).repeat_direction("v")
    if p.kind == "traces-table":  # a Jaeger search: the slowest recent step traces, each a link
        # Jaeger's tag search takes no regex: with a repeat on $experiment each copy has one concrete value
        assert p.repeat == "experiment", "a Jaeger search needs one experiment per panel"
        return (
            b.datasource(JAEGER)
            .with_target(RawQuery(g.jaeger_step_search("$experiment")))
            .show_header(True)
            .sort_by([cb.TableSortByFieldState().display_name("Duration").desc(True)])
        )
    b.datasource(PROM).unit(p.unit).color_scheme(db.FieldColor().mode(_color(p)))
    for i, t in enumerate(p.targets):
        b.with_target(_prom_query(p, i, t))
        if t.unit is not None:
            b.override_by_query(g.ref_id(i), [dm.DynamicConfigValue(id_val="unit", value=t.unit)])
    _kind_options(p, b)
    if p.max is not None:
        b.max(p.max)
    if p.links:
        b.data_links([_link(link) for link in p.links])
    return b


# -- annotations and the dashboard --------------------------------------------------------------------------------
def annotation_builder(a: g.Annotation) -> cogbuilder.Builder[dm.AnnotationQuery]:
    extra = {"step": "30s", "titleFormat": a.title, "textFormat": a.text, "useValueForTime": False}
    assert set(extra) == set(PROM_ANNOTATION_RAW), "the raw keys are declared (tests read them)"
    return _Built(_PromAnnotation(extra, name=a.name, datasource=PROM, enable=True, icon_color=a.color, expr=a.expr))


def _extra_variable(v: dict[str, Any]) -> dm.VariableModel:
    """A dashboard's own variable (a Grafana JSON dict) read into the SDK's class; a key the class does not type
    would be lost silently, so it fails here instead."""
    variable = dm.VariableModel.from_json(v)
    lost = set(v) - set(plain(variable))
    if lost:
        raise ValueError(f"variable {v.get('name')!r}: grafana-foundation-sdk has no field for {sorted(lost)}")
    return variable


def dashboard_builder(d: g.Dashboard) -> db.Dashboard:
    b = (
        db.Dashboard(d.title)
        .uid(d.uid)
        .description(d.description)
        .tags(list(d.tags))
        .version(1)
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .refresh(d.refresh)
        .time("now-3h", "now")
        .timezone("browser")
        .variables(variable_builders())
        .link(
            db.DashboardLink("verl-otel dashboards")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags(["verl-otel"])
            .as_dropdown(True)
        )
    )
    for v in d.extra_vars:
        b.with_variable(_Built(_extra_variable(v)))
    for a in d.annotations:
        b.annotation(annotation_builder(a))
    for p in d.panels:
        b.with_panel(panel_builder(p))
    return b


def variables() -> list[dict[str, Any]]:
    """The template variables every dashboard gets, as Grafana JSON."""
    return [plain(v.build()) for v in variable_builders()]


def render(d: g.Dashboard) -> dict[str, Any]:
    """``d`` as Grafana JSON, produced by grafana-foundation-sdk's typed builders (the parts the SDK cannot type
    are passed through above)."""
    return plain(dashboard_builder(d).build())
