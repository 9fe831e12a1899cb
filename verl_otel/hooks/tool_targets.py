"""The hook targets of verl's tool agent loop, as data (hooks/targets.py lists them with the rest; split out
for the module size)."""

from __future__ import annotations

from verl_otel.hooks.registry import HookTarget


def _t(module: str, attr: str, wrapper: str, feature: str) -> HookTarget:
    return HookTarget(module, attr, "verl_otel.hooks." + wrapper, feature, min_verl="0.9.1", role="agent_loop_worker")


_TAL = "verl.experimental.agent_loop.tool_agent_loop"
_TOOL = "the tool's exception type on its calls"
# verl 0.9.1's ToolAgentLoop (its states and _call_tool's failure texts; not checked on older releases)
AGENT_TARGETS: tuple[HookTarget, ...] = (
    _t(_TAL, "ToolAgentLoop._handle_generating_state", "agent_loop:generating_state", "turn spans"),
    _t(_TAL, "ToolAgentLoop._handle_processing_tools_state", "agent_loop:processing_tools_state", "time in tools"),
    _t(_TAL, "ToolAgentLoop._call_tool", "agent_loop:call_tool", "tool-call spans, outcomes and metrics"),
    _t("verl.tools.function_tool", "FunctionTool.call", "agent_loop:tool_method", _TOOL),
    _t("verl.tools.base_tool", "BaseTool.create", "agent_loop:tool_method", _TOOL),
    _t("verl.tools.base_tool", "BaseTool.execute", "agent_loop:tool_method", _TOOL),
    _t("verl.tools.base_tool", "BaseTool.release", "agent_loop:tool_method", _TOOL),
)
