"""verl's real ``ToolAgentLoop._call_tool`` with a real ``FunctionTool`` and a ``BaseTool`` subclass, hooked: each
outcome (ok, tool raised, unknown tool, invalid arguments, response truncated) told apart, the exception's type
caught by the tool-method hooks, the turn and tool spans under the kept sample's span with its totals, the metrics,
and every hook (the tool class' own, added on first use) taken back by uninstall."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from helpers.memory_spans import memory_provider

from verl_otel import runtime, trackers
from verl_otel import semconv as sc
from verl_otel.hooks import agent_loop, registry, rollout
from verl_otel.hooks.targets import AGENT_TARGETS

PARENT = f"00-{'a' * 32}-{'b' * 16}-01"
BaseTool = pytest.importorskip("verl.tools.base_tool").BaseTool


class Sandbox(BaseTool):
    """A stateful tool: create/execute/release of its own (the lazily hooked class)."""

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, Any]:
        return "sandbox-1", None

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[Any, float, dict]:
        from verl.tools.schemas import ToolResponse

        if parameters.get("code") == "boom":
            raise ZeroDivisionError("division by zero")
        return ToolResponse(text="x" * int(parameters.get("n", 3))), 0.0, {}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        return None


def lookup(query: str) -> str:
    """Look a word up.

    Args:
        query: the word.
    """
    if query == "down":
        raise ConnectionError("search backend down")
    return f"found {query}"


@pytest.fixture
def hooked(tmp_path, monkeypatch):
    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    provider, mem = memory_provider()
    runtime.reset_for_tests()
    runtime.configure(tracer_provider=provider)
    registry.install(AGENT_TARGETS)
    yield mem
    registry.uninstall((*AGENT_TARGETS, *registry.registered()))
    runtime.reset_for_tests()


def _loop() -> Any:
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.tools.function_tool import FunctionTool, _build_schema_from_fn

    loop = object.__new__(ToolAgentLoop)  # verl's method on a loop without a server: only _call_tool runs
    schema = _build_schema_from_fn(lookup, "lookup")
    sandbox = Sandbox(config={"type": "native"}, tool_schema=schema.model_copy(update={}))
    sandbox.name = "sandbox"
    loop.tools = {"lookup": FunctionTool("lookup", lookup, schema), "sandbox": sandbox}
    loop.max_tool_response_length, loop.tool_response_truncate_side = 16, "right"
    return loop


CALLS = [  # (tool name, arguments) -> outcome, error.type
    (("lookup", '{"query": "apples"}'), (sc.TOOL_OK, None)),
    (("lookup", '{"query": "down"}'), (sc.TOOL_RAISED, "ConnectionError")),
    (("sandbox", '{"code": "boom"}'), (sc.TOOL_RAISED, "ZeroDivisionError")),
    (("sandbox", '{"n": 40}'), (sc.TOOL_TRUNCATED, None)),
    (("browse", '{"url": "x"}'), (sc.TOOL_UNKNOWN, sc.TOOL_UNKNOWN)),
    (("lookup", '"not an object"'), (sc.TOOL_BAD_ARGS, sc.TOOL_BAD_ARGS)),
    (("lookup", "{not json"), (sc.TOOL_BAD_ARGS, sc.TOOL_BAD_ARGS)),
]


def test_each_outcome_its_span_and_metric(hooked):
    from verl.experimental.agent_loop.tool_parser import FunctionCall

    loop = _loop()
    tracker = trackers.current().rollout
    tracker.keep = 4
    trackers.current().wire(sc.PROCESS_ROLE_AGENT_LOOP)
    agent_data = SimpleNamespace(prompt_ids=[1] * 10, response_ids=[], _active_tools=loop.tools)

    from verl.workers.rollout.replica import TokenOutput

    from verl_otel.hooks import engine

    # verl's LLM client answers each turn; the last one a weight sync aborted (verl hands back what it had)
    reasons = ["completed"] * (len(CALLS) - 1) + ["aborted"]

    async def server(**_: Any) -> TokenOutput:
        await asyncio.sleep(0.01)
        return TokenOutput(token_ids=[2] * 5, stop_reason=reasons.pop(0))

    async def generate(*_: Any) -> None:  # the turn's generate call, through the client hook
        output = await engine.client_generate(server, SimpleNamespace(), (), {"sampling_params": {}})
        agent_data.response_ids = output.token_ids

    async def sample(_self: Any, trajectory: dict[str, Any]) -> str:
        for (name, args), _ in CALLS:
            await agent_loop.generating_turn(generate, loop, (agent_data, {}), {})

            async def tools(call: Any) -> None:
                await loop._call_tool(call, {}, agent_data)  # hooked by the registry

            await agent_loop.processing_tools(tools, loop, (FunctionCall(name=name, arguments=args),), {})
        return "done"

    async def batch() -> Any:
        tracker.batch_started(sc.MODE_TRAIN, 3, 1, PARENT)
        return await rollout.run_agent_loop(sample, None, (None, {"step": 3, "sample_index": 17}), {})

    assert asyncio.run(batch()) == "done"
    spans = hooked.get_finished_spans()
    [root] = [s for s in spans if s.name == sc.SPAN_ROLLOUT_SAMPLE]
    turns = sorted((s for s in spans if s.name == sc.SPAN_TURN), key=lambda s: s.attributes[sc.ATTR_TURN_INDEX])
    tools = [s for s in spans if s.name.startswith(sc.SPAN_TOOL_PREFIX + " ")]
    assert len(turns) == len(CALLS) and all(t.parent.span_id == root.context.span_id for t in turns)
    assert (
        turns[0].attributes[sc.ATTR_TURN_PROMPT_TOKENS] == 10 and turns[0].attributes[sc.ATTR_TURN_OUTPUT_TOKENS] == 5
    )
    finish = [t.attributes.get(sc.ATTR_GENAI_FINISH_REASONS) for t in turns]
    assert finish == [("completed",)] * (len(CALLS) - 1) + [("aborted",)], finish  # an aborted turn says so
    in_order = sorted(tools, key=lambda s: s.start_time)
    for turn, tool, ((name, _), (outcome, error)) in zip(turns, in_order, CALLS, strict=True):
        assert tool.parent.span_id == turn.context.span_id
        assert tool.name == f"execute_tool {name if outcome != sc.TOOL_UNKNOWN else sc.TOOL_OTHER}"
        assert (tool.attributes[sc.ATTR_TOOL_OUTCOME], tool.attributes.get(sc.ATTR_ERROR_TYPE)) == (outcome, error)
        assert tool.attributes[sc.ATTR_GENAI_OPERATION] == "execute_tool"
        assert sc.ATTR_GENAI_TOOL_ARGS not in tool.attributes  # text only with VERL_OTEL_CAPTURE_TEXT=1
    attrs = root.attributes
    assert (attrs[sc.ATTR_SAMPLE_ASSISTANT_TURNS], attrs[sc.ATTR_SAMPLE_TOOL_CALLS_MADE]) == (7, 7)
    assert attrs[sc.ATTR_SAMPLE_TOOL_FAILURES] == 5
    assert attrs[sc.ATTR_SAMPLE_GENERATE_S] >= 0.07 and attrs[sc.ATTR_SAMPLE_TOOLS_S] > 0
    counts = {
        labels: series.count
        for metric, labels, series in trackers.current().services.store.histograms()
        if metric is sc.TOOL_CALL_SECONDS and series.count  # every outcome of a tool seen has a series, from 0
    }
    assert counts == {
        ("lookup", sc.TOOL_OK): 1,
        ("lookup", sc.TOOL_RAISED): 1,
        ("sandbox", sc.TOOL_RAISED): 1,
        ("sandbox", sc.TOOL_TRUNCATED): 1,
        (sc.TOOL_OTHER, sc.TOOL_UNKNOWN): 1,
        ("lookup", sc.TOOL_BAD_ARGS): 2,
    }
    exemplars = [
        e.trace_id
        for metric, _, series in trackers.current().services.store.histograms()
        if metric is sc.TOOL_CALL_SECONDS
        for e in series.exemplars.values()
    ]
    assert exemplars and set(exemplars) == {"a" * 32}  # the step's trace
    parts = {
        labels[1]: value
        for metric, labels, value in trackers.current().services.store.readings()
        if metric is sc.ROLLOUT_PART_SECONDS
    }
    assert parts[sc.PART_GENERATE] >= 0.07 and parts[sc.PART_TOOLS] > 0 and sc.PART_OTHER in parts
    assert "execute" in Sandbox.__dict__ and hasattr(Sandbox.__dict__["execute"], "__wrapped__")
    rows = {line.split()[0]: line.split()[1:] for line in _top_text().splitlines() if line.strip()}
    assert rows["lookup"] == ["0", "4", "75%"] and rows["sandbox"] == ["0", "2", "50%"], rows  # in flight, calls


def _top_text() -> str:
    """What `verl-otel top` shows of this process' /metrics page (our exporter's text, top's parser and frame)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from rich.console import Console

    from verl_otel.export.prometheus import StoreCollector
    from verl_otel.live.run_view import History, build_view
    from verl_otel.live.sources import Scrape, parse_metrics_text
    from verl_otel.live.view import frame

    registry = CollectorRegistry()
    registry.register(StoreCollector(trackers.current().services.store))
    scrape = Scrape(source="test", targets=1)
    scrape.series += parse_metrics_text(generate_latest(registry).decode(), {"instance": "h:1"})
    console = Console(width=150, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(frame(build_view(scrape), History(), []))
    return console.export_text()


def test_a_generate_call_outside_a_turn_is_left_as_it_is(hooked):
    """A single-turn loop's generate calls (most rollouts) carry no turn: the client hook adds nothing to them."""
    tracker = trackers.current().rollout
    trackers.current().wire(sc.PROCESS_ROLE_AGENT_LOOP)

    async def server() -> str:
        return "output"

    async def sample(_self: Any, trajectory: dict[str, Any]) -> str:
        call = server()
        assert agent_loop.noted_output(call) is call
        return await call

    async def batch() -> Any:
        tracker.batch_started(sc.MODE_TRAIN, 1, 1, PARENT)
        return await rollout.run_agent_loop(sample, None, (None, {"step": 1, "sample_index": 0}), {})

    assert asyncio.run(batch()) == "output"


def test_uninstall_restores_the_tool_class_hooked_on_first_use(hooked):
    original = Sandbox.__dict__["execute"]
    agent_loop._hook_tool_class(_loop().tools["sandbox"])
    assert Sandbox.__dict__["execute"] is not original
    registry.uninstall((*AGENT_TARGETS, *registry.registered()))
    assert Sandbox.__dict__["execute"] is original


def test_tool_labels_are_bounded(hooked):
    tools = trackers.current().agent_tools
    labels = {tools.label(f"tool{i}") for i in range(sc.MAX_TOOL_NAMES + 10)}
    assert len(labels) == sc.MAX_TOOL_NAMES + 1 and sc.TOOL_OTHER in labels
    assert len(tools._names) == sc.MAX_TOOL_NAMES  # names past the cap are not kept
    tools.label("yet another")
    assert len(tools._names) == sc.MAX_TOOL_NAMES


def test_a_tools_outcome_series_start_at_zero(hooked):
    """A tool's series of every outcome are there from its first call at count 0: the first burst of failures of
    a backend gone down (12 calls raised in one scrape) is an increase() the failure alert sees."""
    state = trackers.current().services.store
    trackers.current().agent_tools.label("fresh")
    counts = {labels: series.count for metric, labels, series in state.histograms() if metric is sc.TOOL_CALL_SECONDS}
    assert {o: counts.get(("fresh", o)) for o in sc.TOOL_OUTCOMES} == dict.fromkeys(sc.TOOL_OUTCOMES, 0), counts
