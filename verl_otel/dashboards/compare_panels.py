"""The run-against-run dashboard (what `verl-otel compare BASELINE OTHER` says, from the runs' Prometheus): two run
variables, ``$baseline`` and ``$other`` (experiments of ``$project``), and per phase the median time and the time per
1k tokens of each run side by side, with their ratio (other / baseline), over the dashboard's time range."""

from __future__ import annotations

from typing import Any

from verl_otel import semconv as sc
from verl_otel.dashboards.grafana import PROM_DS, Dashboard, Panel, Row, Target, laid_out

#: the two runs' variables (single experiments of the selected project)
BASELINE, OTHER = "$baseline", "$other"
#: verl's own per-phase time per token (ms per token, which is seconds per 1k tokens), by its timer names
PER_TOKEN_KEYS = "timing_per_token_ms/.*"


def run_filter(run: str) -> str:
    """The matchers every query of this dashboard carries: one run (``$baseline`` or ``$other``) of ``$project``."""
    return f'{sc.LABEL_PROJECT}=~"$project", {sc.LABEL_EXPERIMENT}=~"{run}"'


#: what every query of the dashboard carries (tests/test_dashboards.py checks), one of the two
FILTERS = (run_filter(BASELINE), run_filter(OTHER))


def median_phase_s(run: str) -> str:
    """The median run of each phase over the time range (the phase histogram's buckets)."""
    buckets = f"{sc.PHASE_DURATION.name}_bucket{{{run_filter(run)}}}"
    return f"histogram_quantile(0.5, sum by (le, {sc.LABEL_PHASE}) (increase({buckets}[$__range])))"


def per_1k_tokens_s(run: str) -> str:
    """Each phase's median time per 1k tokens over the time range (verl's timing_per_token_ms, named by phase)."""
    keys = f'{sc.TRAINING_METRIC.name}{{{run_filter(run)}, {sc.LABEL_KEY}=~"{PER_TOKEN_KEYS}"}}'
    median = f"max by ({sc.LABEL_KEY}) (quantile_over_time(0.5, {keys}[$__range]))"
    return f'label_replace({median}, "{sc.LABEL_PHASE}", "$1", "{sc.LABEL_KEY}", "timing_per_token_ms/(.+)")'


def _side(title: str, what: str, expr: Any, run: str, unit: str = "s") -> Panel:
    name = "baseline" if run == BASELINE else "other"
    return Panel(
        f"{title}: {name} run",
        f"{what} in the {name} run (${name}), per phase, over the time range. Healthy: the same bars as the "
        f"{'other' if run == BASELINE else 'baseline'} run's beside it.",
        "bargauge",
        (Target(expr(run), "{{phase}}"),),
        unit=unit,
    )


def _ratio(title: str, expr: Any) -> Panel:
    return Panel(
        f"{title}: other / baseline",
        f"The other run's {title.lower()} over the baseline's, per phase (1 = unchanged; 2 = twice as slow). "
        "`verl-otel compare BASELINE OTHER` gives them with a confidence interval. Healthy: every bar "
        "near 1, or the phase you changed alone away from it.",
        "bargauge",
        (Target(f"{expr(OTHER)} / {expr(BASELINE)}", "{{phase}}"),),
        unit="short",
    )


def _run_variable(name: str, label: str) -> dict[str, Any]:
    """One run: an experiment of the selected project (single value, no "All")."""
    steps = f'{sc.TRAINING_STEP.name}{{{sc.LABEL_PROJECT}=~"$project"}}'
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": PROM_DS,
        "query": {"query": f"label_values({steps}, {sc.LABEL_EXPERIMENT})", "refId": f"var-{name}"},
        "refresh": 2,
        "sort": 1,
        "multi": False,
        "includeAll": False,
        "description": f"the {label.lower()} run's experiment (trainer.experiment_name)",
    }


MEDIAN, PER_TOKEN = "Median phase time", "Time per 1k tokens"
COMPARE = Dashboard(
    "verl-run-compare",
    "verl run against run",
    "Two runs side by side (e.g. before and after a verl upgrade or a config change): per phase, the median time "
    "and the time per 1k tokens of each, and their ratio. `verl-otel compare BASELINE OTHER` says which changed "
    "beyond noise.",
    laid_out(
        (
            Row(
                8,
                _side(MEDIAN, "The median run of each phase", median_phase_s, BASELINE),
                _side(MEDIAN, "The median run of each phase", median_phase_s, OTHER),
                _ratio(MEDIAN, median_phase_s),
            ),
            Row(
                8,
                _side(
                    PER_TOKEN,
                    "verl's time per token of each phase (ms per token = s per 1k)",
                    per_1k_tokens_s,
                    BASELINE,
                ),
                _side(
                    PER_TOKEN, "verl's time per token of each phase (ms per token = s per 1k)", per_1k_tokens_s, OTHER
                ),
                _ratio(PER_TOKEN, per_1k_tokens_s),
            ),
        )
    ),
    extra_vars=(_run_variable("baseline", "Baseline"), _run_variable("other", "Other")),
    filters=FILTERS,
)
