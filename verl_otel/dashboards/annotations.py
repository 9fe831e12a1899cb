"""Annotations shared by both dashboards: firing alerts, validation runs, restarts."""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.dashboards.grafana import (
    Annotation,
    m,
)

_RUN = f"{sc.LABEL_PROJECT}, {sc.LABEL_EXPERIMENT}"  # one row per run when several are selected


# -- annotations (both dashboards) ---------------------------------------------------------------------
_VALIDATE_COUNT = m(sc.PHASE_DURATION.name + "_count", f'{sc.LABEL_PHASE}="{sc.PHASE_VALIDATE}"')
ANNOTATIONS = (
    Annotation(
        "Alerts firing",
        # alerts without run labels (the pipeline's, DCGM's memory) show under every selection: "|" admits the
        # label's absence
        f'{sc.PROM_ALERTS}{{alertstate="firing", {sc.LABEL_PROJECT}=~"$project|", '
        f'{sc.LABEL_EXPERIMENT}=~"$experiment|"}}',
        "{{alertname}}",
        "{{severity}} {{verl_experiment}} {{instance}}",
        "red",
        cpu_empty="no rule fires on the healthy CPU demo (and its Prometheus loads none)",
    ),
    # each validation run adds one to the validate phase's histogram count (push and pull path alike)
    Annotation(
        "Validation runs",
        f"max by ({_RUN}) (changes({_VALIDATE_COUNT}[1m])) > 0",
        "validation",
        "{{verl_experiment}}",
        "blue",
    ),
    # a stalled process recorded a sampling profile of itself (export/captures.py): doctor names the file
    Annotation(
        "Captures",
        f"max by ({_RUN}, {sc.LABEL_PHASE}) (changes({sc.CAPTURES_TOTAL.name}[1m])) > 0",
        "capture {{" + sc.LABEL_PHASE + "}}",
        "{{verl_experiment}}: a stalled process' profile (verl-otel doctor names the file)",
        "purple",
        cpu_empty="the healthy CPU demo never stalls",
    ),
)
