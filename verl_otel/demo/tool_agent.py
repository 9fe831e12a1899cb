"""``verl-otel demo --agent tool``: verl's real ``ToolAgentLoop`` (``tool_agent``) with the demo's tools
(demo/tools.py), and the stand-in LLM server answering with tool calls in the hermes format verl's parser reads.

A sample's turns, as the stand-in answers them (its variant: a checksum of its prompt, mod 4):
turn 1 calls ``search`` ("apples"; variant 1: "tom", whose answer is past ``max_tool_response_length``: truncated),
turn 2 calls ``run_python`` ("2+3"; variant 2: an unknown tool ``browse``; variant 3: arguments that are no JSON
object), turn 3 answers (``#### N``). ``--fail tool@K`` makes step K's search calls raise.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping
from pathlib import Path

from verl_otel.demo import tools

AGENTS = ("single", "tool")
#: verl loads this file by its path and registers its tools: importing it as a module too would register them twice
FUNCTION_TOOLS = Path(__file__).with_name("function_tools.py")
ENV = "VERL_OTEL_DEMO_AGENT"
MAX_TURNS = 4
_TOOLS_YAML = """tools:
  - class_name: verl_otel.demo.tools.SearchTool
    config: {type: native}
    tool_schema:
      type: function
      function:
        name: search
        description: Search the web.
        parameters:
          type: object
          properties: {query: {type: string, description: what to search for}}
          required: [query]
"""


def overrides(agent: str, out: Path) -> list[str]:
    """verl's settings of a tool agent loop run (nothing for the default single-turn loop)."""
    if agent == "single":
        return []
    path = out / "demo_tools.yaml"
    path.write_text(_TOOLS_YAML)
    mt = "actor_rollout_ref.rollout.multi_turn."
    return [
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
        f"{mt}enable=true",
        f"{mt}format=hermes",
        f"{mt}max_assistant_turns={MAX_TURNS}",
        f"{mt}max_tool_response_length=64",
        f"{mt}tool_config_path={path}",
        f"{mt}function_tool_path={FUNCTION_TOOLS}",
        "data.max_response_length=128",
    ]


def env(agent: str, fail: list[str] | None) -> dict[str, str]:
    text = ",".join(fail or [])
    tools.failing_steps(text)  # a bad --fail is refused here, before verl starts
    return {ENV: agent, tools.FAIL_ENV: text}


def on() -> bool:
    return os.environ.get(ENV) == "tool"


class Script:
    """The stand-in server's side: what it answers on each turn of a sample. The turn is read from the prompt (the
    tool calls it already holds: verl's server client gives each turn's request an id of its own), the variant
    from the sample's first prompt (a checksum), so the answers need no state. A prompt that ends inside a call is
    a resumed request (verl resumes a request a weight sync aborted with what it had): the answer goes on with that
    call, as a model decoding on would."""

    def __init__(self, token_ids: Mapping[str, int]) -> None:
        self.call_id = token_ids["<tool_call>"]
        self.close_id = token_ids["</tool_call>"]

    def answer(self, prompt_ids: list[int]) -> list[str] | None:
        """The next turn's words: a tool call, or None (the final answer, the stand-in's usual text)."""
        ids = list(prompt_ids)
        turn = ids.count(self.close_id)
        first = ids.index(self.call_id) if self.call_id in ids else len(ids)
        variant = zlib.crc32(",".join(map(str, ids[:first])).encode()) % 4
        words = _turn(turn, variant)
        if words is not None and ids.count(self.call_id) > turn:  # resumed inside this turn's call: the rest of it
            return words[ids[::-1].index(self.call_id) + 1 :]  # the words from its <tool_call> on are there
        return words


def _turn(turn: int, variant: int) -> list[str] | None:
    if turn == 0:
        return _call('"search",', '{"query":', '"tom"}}' if variant == 1 else '"apples"}}')
    if turn == 1:
        if variant == 2:
            return _call('"browse",', '{"query":', '"apples"}}')
        if variant == 3:
            return ["<tool_call>", '{"name":', '"run_python",', '"arguments":', '"oops"}', "</tool_call>"]
        return _call('"run_python",', '{"expr":', '"2+3"}}')
    return None


def _call(name: str, key: str, value: str) -> list[str]:
    return ["<tool_call>", '{"name":', name, '"arguments":', key, value, "</tool_call>"]
