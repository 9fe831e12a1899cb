"""Dashboards and alert rules as code, built from the metric names in :mod:`verl_otel.semconv`.

``python -m verl_otel.dashboards.build`` writes ``grafana/*.json``, ``deploy/prometheus/rules/verl-alerts.yml``
and the generated tables of ``deploy/README.md``; ``--check`` fails when the committed files drift.

For tests against a live Prometheus::

    for where, expr, cpu_empty in all_expressions():
        rows = prom.query(concrete(expr))   # cpu_empty: why it may return nothing on a CPU run, or None
"""

from __future__ import annotations

import re

_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$")


def concrete(expr: str) -> str:
    """``expr`` as Grafana sends it with every variable at "All" (and a 1m rate interval)."""
    from verl_otel.dashboards.grafana import ALL_VALUES

    for var, value in ALL_VALUES.items():
        expr = expr.replace(var, value)
    return expr


def all_expressions() -> list[tuple[str, str, str | None]]:
    """(where, PromQL, reason it may be empty on a CPU run or None) of every dashboard query and annotation, every
    template variable's series selector and every alert rule. Expressions keep Grafana's variables: see concrete()."""
    from verl_otel.dashboards import alerts, builders, panels

    out: list[tuple[str, str, str | None]] = []
    for dash in panels.DASHBOARDS:
        for var in [*builders.variables(), *dash.extra_vars]:
            # a Prometheus query variable keeps its label_values() in query.query (the SDK's class has no definition)
            query = var.get("query")
            match = _LABEL_VALUES.match(query.get("query", "") if isinstance(query, dict) else "")
            if match:
                out.append((f"{dash.uid}/var/{var['name']}", match["selector"], None))
        for panel in dash.panels:
            for target in panel.targets:
                out.append(
                    (f"{dash.uid}/{panel.title}/{target.legend}", target.expr, target.cpu_empty or panel.cpu_empty)
                )
        for ann in dash.annotations:
            out.append((f"{dash.uid}/annotation/{ann.name}", ann.expr, ann.cpu_empty))
    for rule in alerts.rules():
        out.append((f"alert/{rule.name}", rule.expr, rule.cpu_empty))
    return out
