"""Agentic rollouts read back: how much of a sample went to tools (its ``rollout.sample`` totals) and each step's
tool calls by tool (its ``execute_tool`` spans: those of the samples that got a span, the slowest)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from verl_otel import semconv as sc

_PREFIX = sc.SPAN_TOOL_PREFIX + " "
#: a sample held up by tools: its slowest tool took at least this share of it
TOOL_BOUND_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class SampleTools:
    """A sample's slowest tool: its calls, their seconds, the slowest call's; and the sample's time in tools."""

    tool: str
    calls: int
    total_s: float
    slowest_s: float
    tools_s: float

    def text(self, index: str, sample_s: float) -> str:
        return (
            f"sample {index} spent {self.total_s:.1f} s of {sample_s:.1f} s in {self.calls} call"
            f"{'s' * (self.calls != 1)} of tool {self.tool}, slowest {self.slowest_s:.1f} s"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "calls": self.calls,
            "tool_s": round(self.total_s, 3),
            "slowest_call_s": round(self.slowest_s, 3),
            "all_tools_s": round(self.tools_s, 3),
        }


def sample_tools(attrs: dict[str, Any]) -> SampleTools | None:
    tool = attrs.get(sc.ATTR_SAMPLE_SLOWEST_TOOL)
    if not isinstance(tool, str):
        return None
    try:
        return SampleTools(
            tool,
            int(attrs.get(sc.ATTR_SAMPLE_SLOWEST_TOOL_CALLS, 0)),
            float(attrs.get(sc.ATTR_SAMPLE_SLOWEST_TOOL_TOTAL_S, 0.0)),
            float(attrs.get(sc.ATTR_SAMPLE_SLOWEST_TOOL_S, 0.0)),
            float(attrs.get(sc.ATTR_SAMPLE_TOOLS_S, 0.0)),
        )
    except (TypeError, ValueError):
        return None


def tool_call(name: str, attrs: dict[str, Any], seconds: float) -> tuple[str, float, str] | None:
    """(tool, seconds, outcome) of an ``execute_tool {name}`` span; None for any other span."""
    if not name.startswith(_PREFIX):
        return None
    return (
        str(attrs.get(sc.ATTR_GENAI_TOOL_NAME) or name[len(_PREFIX) :]),
        seconds,
        str(attrs.get(sc.ATTR_TOOL_OUTCOME)),
    )


@dataclass(frozen=True)
class ToolFigures:
    tool: str
    calls: int
    failures: int
    p50_s: float
    max_s: float
    total_s: float

    def text(self) -> str:
        share = self.failures / self.calls if self.calls else 0.0
        return (
            f"tool {self.tool}: {self.calls} calls, {self.failures} failed ({share:.0%}), "
            f"p50 {self.p50_s:.2f} s, slowest {self.max_s:.2f} s, {self.total_s:.1f} s in all"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "calls": self.calls,
            "failures": self.failures,
            "p50_s": round(self.p50_s, 3),
            "max_s": round(self.max_s, 3),
            "total_s": round(self.total_s, 3),
        }


def figures(calls: list[tuple[str, float, str]]) -> list[ToolFigures]:
    """Per tool, most time first."""
    by: dict[str, list[tuple[float, str]]] = {}
    for tool, seconds, outcome in calls:
        by.setdefault(tool, []).append((seconds, outcome))
    out = [
        ToolFigures(
            tool,
            len(rows),
            sum(1 for _, o in rows if o in sc.TOOL_FAILURES),
            statistics.median(s for s, _ in rows),
            max(s for s, _ in rows),
            sum(s for s, _ in rows),
        )
        for tool, rows in by.items()
    ]
    return sorted(out, key=lambda f: -f.total_s)
