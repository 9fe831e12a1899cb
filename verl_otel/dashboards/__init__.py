"""Dashboards and alert rules as code, built from the metric names in :mod:`verl_otel.semconv`.

``python -m verl_otel.dashboards.build`` writes ``grafana/*.json`` and
``deploy/prometheus/rules/verl-alerts.yml``; ``--check`` fails when the committed files drift.
"""

from __future__ import annotations


def all_expressions() -> list[tuple[str, str, str | None]]:
    """(where, PromQL, reason it may be empty on a CPU run or None) of every dashboard panel and alert."""
    from verl_otel.dashboards import alerts, panels

    out: list[tuple[str, str, str | None]] = []
    for dash in panels.DASHBOARDS:
        for panel in dash.panels:
            for target in panel.targets:
                out.append((f"{dash.uid}/{panel.title}/{target.legend}", target.expr,
                            target.cpu_empty or panel.cpu_empty))
    for rule in alerts.rules():
        out.append((f"alert/{rule.name}", rule.expr, rule.cpu_empty))
    return out
