"""Agentic rollouts (verl's tool agent loop): the training-progress dashboard's "Tools" rows (calls and p50/p99 by
tool, failure share by tool, turns per sample, generation vs tools) and the tool alerts (a tool failing a share of
its calls, a tool's p99 far above its own history)."""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.dashboards.grafana import Panel, Row, Target, m
from verl_otel.dashboards.promql import RUN
from verl_otel.dashboards.rule import Rule
from verl_otel.dashboards.thresholds import Thresholds

_R = "$__rate_interval"
_CALLS = sc.TOOL_CALL_SECONDS.name
_CPU = "only a run with verl's tool agent loop has tool calls (verl-otel demo --agent tool)"
_FAILED = "|".join(sorted(sc.TOOL_FAILURES))
_FAILED_SEL = f'{sc.LABEL_OUTCOME}=~"{_FAILED}"'


def _rate(selector: str, window: str, by: str = sc.LABEL_TOOL) -> str:
    return f"sum by ({by}) (rate({selector}[{window}]))"


def _quantile(q: float, window: str, sel: str, by: str = sc.LABEL_TOOL) -> str:
    return f"histogram_quantile({q:g}, sum by (le, {by}) (rate({_CALLS}_bucket{sel}[{window}])))"


TOOL_CALLS = Panel(
    "Tool calls/s by tool and outcome",
    "Tool calls of the agent loops per second, by tool and how they ended (ok, response_truncated, tool_raised, "
    "unknown_tool, invalid_arguments). Healthy: ok dominates; a rising tool_raised is a tool or sandbox going down, "
    "unknown_tool / invalid_arguments are the model's mistakes.",
    "timeseries",
    (Target(_rate(m(f"{_CALLS}_count"), _R, f"{sc.LABEL_TOOL}, {sc.LABEL_OUTCOME}"), "{{tool}} {{outcome}}"),),
    cpu_empty=_CPU,
)
TOOL_LATENCY = Panel(
    "Tool call p50 / p99 by tool",
    "Each tool's median and 99th-percentile call duration (exemplars link to the slowest calls' step traces). "
    "Healthy: steady; a p99 far above the tool's own history fires VerlToolSlow.",
    "timeseries",
    tuple(Target(_quantile(q, _R, m("")), f"{{{{tool}}}} p{int(q * 100)}") for q in (0.5, 0.99)),
    unit="s",
    cpu_empty=_CPU,
)
TOOL_FAILURES = Panel(
    "Tool failure share by tool",
    "Share of each tool's calls that failed (the tool raised, an unknown tool, invalid arguments): verl hands the "
    "model an error text and trains on; a tool that went down shows here, not in the loss. Healthy: near 0; "
    "VerlToolFailing fires past its threshold.",
    "timeseries",
    (
        Target(
            f"{_rate(m(_CALLS + '_count', _FAILED_SEL), _R)} / {_rate(m(_CALLS + '_count'), _R)}",
            "{{tool}}",
        ),
    ),
    unit="percentunit",
    max=1,
    cpu_empty=_CPU,
)
TURNS = Panel(
    "Turns per sample (p50 / p95)",
    "Assistant turns (generate calls) per finished agent-loop sample. Healthy: near the task's usual number; a "
    "climb to max_assistant_turns means samples loop on tools without answering.",
    "timeseries",
    tuple(
        Target(
            f"histogram_quantile({q:g}, sum by (le, {sc.LABEL_MODE}) "
            f"(rate({m(sc.SAMPLE_TURNS.name + '_bucket')}[{_R}])))",
            f"{{{{mode}}}} p{int(q * 100)}",
        )
        for q in (0.5, 0.95)
    ),
    cpu_empty=_CPU,
)
GENERATION_VS_TOOLS = Panel(
    "Rollout time: generation vs tools vs waiting",
    "Share of the agent-loop samples' time spent in generate calls, in tool calls and in the rest (tokenizing, "
    "waiting for the loop). Healthy for a search agent: generation dominates; tools above half means the GPUs wait "
    "on tools (`verl-otel slow-steps --tools` names them).",
    "timeseries",
    (
        Target(
            f"{_rate(m(sc.ROLLOUT_PART_SECONDS.name), _R, sc.LABEL_PART)} / ignoring({sc.LABEL_PART}) group_left "
            f"sum(rate({m(sc.ROLLOUT_PART_SECONDS.name)}[{_R}]))",
            "{{part}}",
        ),
    ),
    unit="percentunit",
    stacked=True,
    max=1,
    cpu_empty=_CPU,
)

ROWS = (Row(8, TOOL_CALLS, TOOL_LATENCY, TOOL_FAILURES), Row(8, TURNS, GENERATION_VS_TOOLS))


def tool_rules(t: Thresholds) -> list[Rule]:
    by = f"{RUN}, {sc.LABEL_TOOL}"
    w = t.tool_failure_window
    calls = f"sum by ({by}) (increase({_CALLS}_count[{w}]))"
    failed = f"sum by ({by}) (increase({_CALLS}_count{{{_FAILED_SEL}}}[{w}]))"
    h = t.tool_p99_history
    now = f"histogram_quantile(0.99, sum by (le, {by}) (rate({_CALLS}_bucket[{t.tool_p99_window}])))"
    before = f"histogram_quantile(0.99, sum by (le, {by}) (rate({_CALLS}_bucket[{h}] offset {t.tool_p99_window})))"
    return [
        Rule(
            "VerlToolFailing",
            f"({failed} / {calls} > {t.tool_failure_share:g}) and on({by}) ({calls} >= {t.tool_failure_min_calls:g})",
            t.tool_failure_for,
            "critical",
            "tool {{ $labels.tool }} fails {{ $value | humanizePercentage }} of its calls",
            f"More than {t.tool_failure_share:.0%} of the calls of this tool failed within {w} (it raised, or the "
            "model named an unknown tool or gave invalid arguments). verl hands the model the error text and "
            "trains on, so a sandbox or search backend that went down shows up as a reward curve gone flat days "
            "later. The tool's execute_tool spans carry error.type; check its backend.",
            cpu_empty=_CPU,
        ),
        Rule(
            "VerlToolSlow",
            f"({now} > {t.tool_p99_factor:g} * {before}) and on({by}) ({now} > {t.tool_p99_min_s:g})",
            "5m",
            "warning",
            "tool {{ $labels.tool }}: p99 call time far above its own history",
            f"This tool's p99 call time over {t.tool_p99_window} is above {t.tool_p99_factor:g}x its p99 over the "
            f"{h} before (and above {t.tool_p99_min_s:g}s): the rollout waits on it (`verl-otel slow-steps --tools`; "
            "the histogram's exemplars link to the slowest calls' traces).",
            cpu_empty=_CPU,
        ),
    ]
