"""Agentic rollouts (verl's ``ToolAgentLoop``): the turn and tool-call spans under a ``rollout.sample``, their
attributes (OpenTelemetry's GenAI conventions where they fit), tool-call outcomes, the sample's totals and the
metrics (docs/guides/agentic-rollouts.md)."""

from __future__ import annotations

from typing import Final

from verl_otel.semconv.metric_def import LABEL_MODE, LABEL_ROLLOUT_WORKER, MetricDef

# Spans: rollout.sample -> rollout.turn (one per assistant turn: its generate call, then the tools it asked for)
#        -> execute_tool {name} (one per tool call; GenAI's span name)
SPAN_TURN: Final = "rollout.turn"
SPAN_TOOL_PREFIX: Final = "execute_tool"  # the span is "execute_tool {gen_ai.tool.name}"
ATTR_TURN_INDEX: Final = "verl.turn.index"  # 1, 2, ... within the sample
ATTR_TURN_PROMPT_TOKENS: Final = "verl.turn.prompt_tokens"  # the context the generate call was given
ATTR_TURN_OUTPUT_TOKENS: Final = "verl.turn.output_tokens"  # what it generated
ATTR_TURN_GENERATE_S: Final = "verl.turn.generate_s"  # its generate call (the rest of the turn: its tools)
# GenAI conventions (gen_ai.*, error.type): the tool call
ATTR_GENAI_OPERATION: Final = "gen_ai.operation.name"
GENAI_OP_EXECUTE_TOOL: Final = "execute_tool"
ATTR_GENAI_TOOL_NAME: Final = "gen_ai.tool.name"
ATTR_GENAI_TOOL_TYPE: Final = "gen_ai.tool.type"  # "function"
ATTR_GENAI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
ATTR_GENAI_TOOL_ARGS: Final = "gen_ai.tool.call.arguments"  # text: VERL_OTEL_CAPTURE_TEXT=1 only
ATTR_GENAI_TOOL_RESULT: Final = "gen_ai.tool.call.result"  # text: VERL_OTEL_CAPTURE_TEXT=1 only
ATTR_ERROR_TYPE: Final = "error.type"
ATTR_TOOL_OUTCOME: Final = "verl.tool.outcome"  # one of TOOL_OUTCOMES
ATTR_TOOL_ARGS_CHARS: Final = "verl.tool.arguments_chars"
ATTR_TOOL_RESULT_CHARS: Final = "verl.tool.result_chars"  # what the model reads back (after verl's truncation)

# How a tool call ended. verl turns every failure into a text the model reads back; these tell them apart.
TOOL_OK: Final = "ok"
TOOL_RAISED: Final = "tool_raised"  # the tool (create/execute/release, or the function) raised
TOOL_UNKNOWN: Final = "unknown_tool"  # the model named a tool the sample does not have
TOOL_BAD_ARGS: Final = "invalid_arguments"  # arguments that are not JSON
TOOL_TRUNCATED: Final = "response_truncated"  # answered, past rollout.multi_turn.max_tool_response_length
TOOL_OUTCOMES: Final[tuple[str, ...]] = (TOOL_OK, TOOL_RAISED, TOOL_UNKNOWN, TOOL_BAD_ARGS, TOOL_TRUNCATED)
#: outcomes that are failures (error.type and the failure share); a truncated answer is a success
TOOL_FAILURES: Final[frozenset[str]] = frozenset((TOOL_RAISED, TOOL_UNKNOWN, TOOL_BAD_ARGS))
#: the tool label's value for a name past the cap (bounded label sets: the model invents tool names)
TOOL_OTHER: Final = "_other"
MAX_TOOL_NAMES: Final = 32  # distinct tool label values per process; the rest are TOOL_OTHER
#: per sample: turns and tool calls kept as spans (the totals count every one)
MAX_TURN_SPANS: Final = 64
MAX_TOOL_SPANS: Final = 64

# The sample's totals (on rollout.sample)
ATTR_SAMPLE_ASSISTANT_TURNS: Final = "verl.sample.assistant_turns"
ATTR_SAMPLE_TOOL_CALLS_MADE: Final = "verl.sample.tool_calls_made"  # tool calls executed (by our count)
ATTR_SAMPLE_TOOL_FAILURES: Final = "verl.sample.tool_failures"
ATTR_SAMPLE_GENERATE_S: Final = "verl.sample.generate_s"  # in generate calls
ATTR_SAMPLE_TOOLS_S: Final = "verl.sample.tools_s"  # in tool calls (a turn's parallel calls counted once)
ATTR_SAMPLE_WAITING_S: Final = "verl.sample.waiting_s"  # the rest: tokenizing, scheduling, waiting for the loop
ATTR_SAMPLE_SLOWEST_TOOL: Final = "verl.sample.slowest_tool"  # the tool of its slowest call
ATTR_SAMPLE_SLOWEST_TOOL_S: Final = "verl.sample.slowest_tool_s"  # its slowest call's seconds
ATTR_SAMPLE_SLOWEST_TOOL_CALLS: Final = "verl.sample.slowest_tool_calls"  # that tool's calls in the sample
ATTR_SAMPLE_SLOWEST_TOOL_TOTAL_S: Final = "verl.sample.slowest_tool_total_s"  # ... and their seconds
ATTR_SAMPLE_TURNS_DROPPED: Final = "verl.sample.turns_unspanned"  # past MAX_TURN_SPANS / MAX_TOOL_SPANS
#: key of our copy of a sample's trajectory: its AgentSample record (telemetry/agent.py)
SAMPLE_AGENT_KEY: Final = "verl_otel_agent"

# Metrics
LABEL_TOOL: Final = "tool"
LABEL_OUTCOME: Final = "outcome"
LABEL_PART: Final = "part"
PART_GENERATE: Final = "generate"
PART_TOOLS: Final = "tools"
PART_OTHER: Final = "other"
TOOL_BUCKETS_S: Final[tuple[float, ...]] = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
TURN_BUCKETS: Final[tuple[float, ...]] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)

TOOL_CALL_SECONDS = MetricDef(
    "verl_tool_call_seconds",
    "histogram",
    "Duration of each tool call of an agent loop, by tool and outcome; its count is the calls by tool and "
    "outcome; exemplars carry the step's trace id.",
    (LABEL_TOOL, LABEL_OUTCOME),
    unit="s",
    buckets=TOOL_BUCKETS_S,
)
SAMPLE_TURNS = MetricDef(
    "verl_rollout_sample_turns",
    "histogram",
    "Assistant turns (generate calls) per finished agent-loop sample.",
    (LABEL_MODE,),
    unit="{turn}",
    buckets=TURN_BUCKETS,
)
ROLLOUT_PART_SECONDS = MetricDef(
    "verl_rollout_part_seconds_total",
    "counter",
    "Seconds finished agent-loop samples spent in generate calls, in tool calls and in the rest (waiting), summed "
    "over samples; tools over the sum is the share of rollout time in tools.",
    (LABEL_MODE, LABEL_PART),  # per process: its instance (no rollout_worker, which is in its deprecation period)
    unit="s",
)
TOOL_CALLS_INFLIGHT = MetricDef(
    "verl_tool_calls_inflight",
    "gauge",
    "Tool calls running now in this agent-loop worker, by tool (a hung tool holds its count up).",
    (LABEL_ROLLOUT_WORKER, LABEL_TOOL),
    unit="{call}",
)
AGENT_METRICS: Final[tuple[MetricDef, ...]] = (
    TOOL_CALL_SECONDS,
    SAMPLE_TURNS,
    ROLLOUT_PART_SECONDS,
    TOOL_CALLS_INFLIGHT,
)
