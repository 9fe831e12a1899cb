"""The demo's tools (``verl-otel demo --agent tool``) and the stand-in's tool calls, without a run: the stand-in's
calls parse with verl's hermes parser into the turns the demo promises, the search tool's plants act on their step
only (a failing backend, one slow call in the whole run), the sandbox runs a real subprocess."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from verl_otel.demo import assets, tool_agent, tools

pytestmark = pytest.mark.integration  # the sandbox tool runs a Python subprocess


def test_the_stand_ins_tool_calls_parse_into_each_variant(tmp_path):
    """Each sample's turns follow from its prompt alone (verl gives each turn's request an id of its own); a request
    a weight sync aborted halfway, resumed with what it had, goes on with the same call (a colocate_async run's
    sample once ended after one turn: the resumed half-call and a next turn's call made one unparsable call)."""
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.tool_parser import ToolParser

    tok = AutoTokenizer.from_pretrained(assets.build(tmp_path / "assets") / "tiny_model")
    vocab = tok.get_vocab()
    parser = ToolParser.get_tool_parser("hermes", tok)
    script = tool_agent.Script(vocab)
    seen = set()
    for a in range(1, 12):
        prompt, calls = tok.encode(f"what is {a} plus 2 ?"), []
        while (words := script.answer(prompt)) is not None:
            ids = [vocab[w] for w in words] + [tok.eos_token_id]
            half = ids[: len(ids) // 2]  # what the stand-in hands back when aborted
            assert [*half, *(vocab[w] for w in script.answer([*prompt, *half]) or ()), tok.eos_token_id] == ids
            [call] = asyncio.run(parser.extract_tool_calls(ids))[1]
            calls.append((call.name, call.arguments))
            prompt = [*prompt, *ids, *tok.encode("found 3 apples")]  # the tool's answer, as the next turn's prompt
        seen.add(tuple(calls))
    assert seen == {
        (("search", '{"query": "apples"}'), ("run_python", '{"expr": "2+3"}')),
        (("search", '{"query": "tom"}'), ("run_python", '{"expr": "2+3"}')),  # tom's answer is truncated
        (("search", '{"query": "apples"}'), ("browse", '{"query": "apples"}')),  # an unknown tool
        (("search", '{"query": "apples"}'), ("run_python", '"oops"')),  # arguments that are no JSON object
    }


def test_search_plants_act_on_their_step(tmp_path, monkeypatch):
    from verl.tools.schemas import OpenAIFunctionToolSchema

    monkeypatch.setenv("VERL_OTEL_DIR", str(tmp_path))
    monkeypatch.setenv("VERL_OTEL_DEMO_SLOW", "tool@1=0.3")
    monkeypatch.setenv(tools.FAIL_ENV, "tool@2")
    schema = OpenAIFunctionToolSchema.model_validate(
        {
            "type": "function",
            "function": {"name": "search", "description": "", "parameters": {"type": "object", "properties": {}}},
        }
    )
    search = tools.SearchTool({"type": "native"}, schema)

    async def call(step: int) -> tuple[float, str]:
        data = SimpleNamespace(extra_fields={"global_steps": step - 1})
        iid, _ = await search.create()
        t0 = asyncio.get_running_loop().time()
        try:
            out, _, _ = await search.execute(iid, {"query": "apples"}, agent_data=data)
            return asyncio.get_running_loop().time() - t0, out.text
        finally:
            await search.release(iid)

    took, text = asyncio.run(call(1))
    assert took >= 0.3 and text == "tom has 3 apples"
    assert asyncio.run(call(1))[0] < 0.3  # one slow call in the run
    with pytest.raises(ConnectionError):
        asyncio.run(call(2))
    assert asyncio.run(call(3))[1] == "tom has 3 apples"
    with pytest.raises(ValueError):
        tools.failing_steps("rollout@2")


def test_the_sandbox_runs_a_subprocess():
    assert tools.run_python("2+3") == "5"
    with pytest.raises(RuntimeError, match="SyntaxError"):
        tools.run_python('"oops')
