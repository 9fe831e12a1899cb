"""The demo's ``@function_tool`` file: verl's ``multi_turn.function_tool_path`` loads it by its path (never import
it: its tools would be registered twice, which verl refuses)."""

from verl.tools.function_tool import function_tool

from verl_otel.demo import tools


@function_tool("run_python")
def run_python(expr: str) -> str:
    """Evaluate a Python expression in a sandbox.

    Args:
        expr: the expression.
    """
    return tools.run_python(expr)
