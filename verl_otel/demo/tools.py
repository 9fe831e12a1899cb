"""The demo's tools, run by verl's real ``ToolAgentLoop`` in the agent-loop workers (``--agent tool``):

- ``search`` (:class:`SearchTool`, a ``BaseTool`` with a lifecycle: create / execute / release), a stand-in search
  backend; the plants act here: ``--slow tool@K=S`` (its first call of step K takes S more seconds, one call in the
  whole run), ``--hang tool@K=S`` (its first call of step K blocks S seconds) and ``--fail tool@K`` (every call of
  step K raises, a backend gone down);
- ``run_python`` (an ``@function_tool`` function, demo/function_tools.py): evaluates an expression in a Python
  subprocess, as a code sandbox does.

The step is the one the stand-in LLM server says it generates for (``global_steps`` + 1 in its answer's fields,
which verl keeps on the sample's ``agent_data``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse

from verl_otel.demo.slow import ENV, HANG_ENV, SlowSpec

FAIL_ENV = "VERL_OTEL_DEMO_FAIL"  # --fail tool@K,...: the steps whose search calls raise
PLANT = "tool"  # the plants' phase name: --slow/--hang/--fail tool@K
_RESULTS = {"apples": "tom has 3 apples", "tom": "tom is a boy who has many apples " * 4}


def failing_steps(text: str | None = None) -> set[int]:
    """``--fail tool@K`` (comma-separated): the steps K whose search calls raise."""
    steps = set()
    for part in filter(None, (p.strip() for p in (os.environ.get(FAIL_ENV, "") if text is None else text).split(","))):
        phase, _, step = part.partition("@")
        if phase != PLANT or not step.isdigit():
            raise ValueError(f"bad --fail {part!r}: expected {PLANT}@STEP")
        steps.add(int(step))
    return steps


def _first(kind: str, step: int) -> bool:
    """Whether this is the run's first call of ``kind`` at ``step`` (across the agent-loop workers: a file)."""
    path = os.path.join(os.environ.get("VERL_OTEL_DIR") or "/tmp", f".demo-tool-{kind}-{step}")
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except OSError:
        return False


class SearchTool(BaseTool):
    """A search backend with per-trajectory instances."""

    def __init__(self, config: dict, tool_schema: Any) -> None:
        super().__init__(config, tool_schema)
        self._instances: dict[str, str] = {}
        self.slow, self.hang = SlowSpec.from_env(ENV), SlowSpec.from_env(HANG_ENV)
        self.fail = failing_steps() if os.environ.get(FAIL_ENV) else set()

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id = instance_id or uuid.uuid4().hex
        self._instances[instance_id] = ""
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        data = kwargs.get("agent_data")
        fields = getattr(data, "extra_fields", None) or {}
        step = int(fields.get("global_steps") or 0) + 1  # weights of step k-1 generate step k
        hang = self.hang.seconds(PLANT, step)
        if hang and _first("hang", step):
            await asyncio.sleep(hang)  # a backend that does not answer (no timeout in verl)
        slow = self.slow.seconds(PLANT, step)
        if slow and _first("slow", step):
            await asyncio.sleep(slow)
        if step in self.fail:
            raise ConnectionError("search backend unreachable (demo --fail tool)")
        query = str(parameters.get("query", ""))
        self._instances[instance_id] = query
        return ToolResponse(text=_RESULTS.get(query, "no result")), 0.0, {}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)


def run_python(expr: str) -> str:
    """A sandbox: ``expr`` evaluated by a Python subprocess (no builtins), its output or its error."""
    code = f"print(eval({expr!r}, {{'__builtins__': {{}}}}))"
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "sandbox failed")
    return proc.stdout.strip()
