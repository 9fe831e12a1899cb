"""verl's real ``ToolAgentLoop.run`` in this process (no Ray, no training): the demo's tools (a ``BaseTool``
with a lifecycle, an ``@function_tool`` running a subprocess), verl's hermes parser and Continuous Token builder
on the demo's tokenizer, the demo's stand-in LLM server's own logic answering with tool calls; the hooks
installed. Each sample's turns and tool calls become spans under its ``rollout.sample``, every outcome is
counted, a failing backend is ``tool_raised`` with its exception type, and a hung tool call is a stall whose
evidence names the tool, the sample and the frame inside the tool."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from helpers.memory_spans import memory_provider

from verl_otel import runtime, trackers
from verl_otel import semconv as sc
from verl_otel.hooks import registry, rollout
from verl_otel.hooks.targets import AGENT_TARGETS

pytestmark = pytest.mark.integration  # the sandbox tool runs Python subprocesses
PARENT = f"00-{'c' * 32}-{'d' * 16}-01"
N = 8  # samples: each of the stand-in's 4 variants twice


@pytest.fixture
def env(tmp_path, monkeypatch):
    from verl_otel.demo import tool_agent, tools

    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    monkeypatch.setenv(tool_agent.ENV, "tool")
    monkeypatch.setenv(tools.FAIL_ENV, "tool@2")
    monkeypatch.setenv("VERL_OTEL_DEMO_HANG", "tool@3=4")
    monkeypatch.setenv(sc.ENV_STALL_SECONDS, "1.5")
    monkeypatch.setenv(sc.ENV_STALL_MIN_SECONDS, "1")
    provider, mem = memory_provider()
    runtime.reset_for_tests()
    runtime.configure(tracer_provider=provider)
    registry.install(AGENT_TARGETS)
    yield tmp_path, mem
    registry.uninstall((*AGENT_TARGETS, *registry.registered()))
    runtime.reset_for_tests()


def _loop(asset_dir: Path, out: Path) -> tuple[Any, Any]:
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.tools.tool_registry import load_all_tools

    from verl_otel.demo import standins, tool_agent

    ov = dict(o.split("=", 1) for o in tool_agent.overrides("tool", out) if o.startswith("actor_rollout_ref"))
    mt = {k.rsplit(".", 1)[1]: v for k, v in ov.items() if ".multi_turn." in k}
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 32,
                    "response_length": 128,
                    "full_determinism": False,
                    "multi_turn": {
                        "max_assistant_turns": int(mt["max_assistant_turns"]),
                        "max_user_turns": None,
                        "max_parallel_calls": 1,
                        "max_tool_response_length": int(mt["max_tool_response_length"]),
                        "tool_response_truncate_side": "middle",
                        "format": mt["format"],
                    },
                }
            }
        }
    )
    tok = AutoTokenizer.from_pretrained(asset_dir / "tiny_model")
    server_cls = standins.StubLLMServer.__ray_metadata__.modified_class  # the Ray actor's own class, in process
    server = server_cls(tok.get_vocab(), tok.eos_token_id, 128, awake=True)
    tool_list = load_all_tools(mt["tool_config_path"], str(tool_agent.FUNCTION_TOOLS))
    loop = ToolAgentLoop(
        DictConfigWrap(config),
        server,  # its generate(request_id, prompt_ids, sampling_params, ...) is the server manager's call
        tok,
        None,
        None,
        DictConfigWrap(OmegaConf.create({})),
        tools=ToolListWrap(tool_list),
    )
    return loop, server


def test_real_tool_agent_loop(env, capsys):
    from verl_otel.demo import assets

    out, mem = env
    asset_dir = assets.build(out / "assets")
    tracker = trackers.current().rollout
    tracker.keep = N
    trackers.current().wire(sc.PROCESS_ROLE_AGENT_LOOP)

    async def steps() -> list[list[Any]]:
        loop, server = _loop(asset_dir, out)  # verl's loop keeps the event loop it was made on

        async def agent(_self: Any, trajectory: dict[str, Any]) -> Any:
            # the stand-in's variant follows from the prompt: these cover its 4
            prompt = [{"role": "user", "content": f"what is {trajectory['sample_index'] + 3} plus 2 ?"}]
            return await loop.run({"temperature": 1.0}, raw_prompt=prompt)

        done = []
        for number in (1, 2, 3):
            server.version = number - 1  # weights of step k-1 generate step k
            tracker.batch_started(sc.MODE_TRAIN, number, N, PARENT)
            trajs = [{"step": number, "sample_index": i, "rollout_n": 0, "validate": False} for i in range(N)]
            done.append(await asyncio.gather(*(rollout.run_agent_loop(agent, None, (None, t), {}) for t in trajs)))
        return done

    for outs in asyncio.run(steps()):
        # verl counts the prompt, 3 assistant turns and 2 tool answers
        assert all(o.num_turns == 6 for o in outs), [o.num_turns for o in outs]

    spans = mem.get_finished_spans()
    samples = {s.context.span_id: s for s in spans if s.name == sc.SPAN_ROLLOUT_SAMPLE}
    turns = {s.context.span_id: s for s in spans if s.name == sc.SPAN_TURN}
    tool_spans = [s for s in spans if s.name.startswith("execute_tool ")]
    assert len(samples) == 3 * N and len(turns) == 3 * 3 * N and len(tool_spans) == 3 * 2 * N
    assert all(t.parent.span_id in samples for t in turns.values())
    assert all(c.parent.span_id in turns for c in tool_spans)
    first = next(iter(samples.values())).attributes
    assert first[sc.ATTR_SAMPLE_ASSISTANT_TURNS] == 3 and first[sc.ATTR_SAMPLE_TOOL_CALLS_MADE] == 2
    outcomes = {(c.attributes[sc.ATTR_GENAI_TOOL_NAME], c.attributes[sc.ATTR_TOOL_OUTCOME]) for c in tool_spans}
    assert outcomes == {
        ("search", sc.TOOL_OK),
        ("search", sc.TOOL_TRUNCATED),
        ("search", sc.TOOL_RAISED),  # step 2: the backend is down
        ("run_python", sc.TOOL_OK),
        ("run_python", sc.TOOL_BAD_ARGS),
        (sc.TOOL_OTHER, sc.TOOL_UNKNOWN),
    }
    raised = [c for c in tool_spans if c.attributes[sc.ATTR_TOOL_OUTCOME] == sc.TOOL_RAISED]
    assert {c.attributes[sc.ATTR_ERROR_TYPE] for c in raised} == {"ConnectionError"} and len(raised) == N
    counts = {
        labels: series.count
        for metric, labels, series in trackers.current().services.store.histograms()
        if metric is sc.TOOL_CALL_SECONDS
    }
    assert counts[("search", sc.TOOL_RAISED)] == N and sum(counts.values()) == 3 * 2 * N

    # the hung search call of step 3: a stall of phase execute_tool, its evidence naming tool, sample and frame
    from verl_otel.analysis import stall_records as read_stalls

    [stall] = [s for s in read_stalls.read_dir(out / sc.STALLS_DIR) if s.phase == sc.SPAN_TOOL_PREFIX]
    assert stall.call.startswith("execute_tool search (sample #") and stall.kind == sc.STALL_TOOL, stall
    assert stall.step == 3 and stall.pid is not None and stall.evidence, stall
    # the call's await chain, down to the tool's frame (here the test's own thread is the one that entered it, and
    # its frame is the record's; in an agent-loop worker, Ray's event-loop thread has none of verl's or ours)
    evidence = Path(stall.evidence).read_text()
    assert 'tools.py", line' in evidence and "in execute" in evidence, evidence[-2000:]
    from verl_otel.cli.main import main

    capsys.readouterr()
    assert main(["doctor", "--dir", str(out)]) == 0
    text = capsys.readouterr().out
    assert "execute_tool search (sample #" in text and "step 3" in text, text
