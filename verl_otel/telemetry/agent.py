"""Agentic rollouts: what one sample of verl's tool agent loop did (its turns and tool calls) and the process'
tool figures (docs/guides/agentic-rollouts.md).

Per sample, :class:`AgentSample` holds its totals and, for the first MAX_TURN_SPANS turns and MAX_TOOL_SPANS
tool calls, one plain tuple each (ints and strings only: the garbage collector stops walking such a tuple
after its first pass, and every sample of a batch is in flight at once). The records become spans only for
the samples that get a ``rollout.sample`` span (the slowest; telemetry/rollout_spans.py); the others are
dropped with their sample. :class:`AgentTools` turns each tool call and finished sample into metric
observations, with the tool label bounded (the model invents tool names).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Status, StatusCode

from verl_otel import semconv as sc
from verl_otel.process.metrics import Reading
from verl_otel.process.text import as_text
from verl_otel.telemetry.services import Services

# a turn: (start, generate end, end, prompt tokens, output tokens, finish reason ("": not said)), monotonic ns
Turn = tuple[int, int, int, int, int, str]
# a tool call: (start, end, turn, tool, outcome, error type, call id, argument chars, result chars, args, result)
ToolCall = tuple[int, int, int, str, str, str, str, int, int, str, str]


class AgentSample:
    """One sample's turns and tool calls (written by the hooks on the sample's own task: no lock)."""

    __slots__ = ("failures", "generate_ns", "index", "n_turns", "slowest", "tool_calls", "tools", "tools_ns", "turns")

    def __init__(self, index: int | None) -> None:
        self.index = index  # verl's sample index (the stall's call names it)
        # tuples, not lists: a tuple of tuples of ints and strings leaves the garbage collector's lists after its
        # first pass, a list never does (with every sample of a batch in flight, each is walked by every full pass)
        self.turns: tuple[Turn, ...] = ()
        self.tools: tuple[ToolCall, ...] = ()
        self.n_turns = self.tool_calls = self.failures = 0
        self.generate_ns = self.tools_ns = 0
        self.slowest: tuple[int, str] = (0, "")  # (ns, tool) of its slowest call

    def turn(self, start: int, end: int, prompt_tokens: int, output_tokens: int, finish: str = "") -> None:
        self.n_turns += 1
        self.generate_ns += end - start
        if len(self.turns) < sc.MAX_TURN_SPANS:
            self.turns += ((start, end, end, prompt_tokens, output_tokens, finish),)

    def tools_done(self, start: int, end: int) -> None:
        """The turn's tool calls ran from ``start`` to ``end`` (in parallel: counted once)."""
        self.tools_ns += end - start
        if self.turns and self.n_turns <= sc.MAX_TURN_SPANS:  # its turn has a record: the tools end it
            s, g, _, p, o, f = self.turns[-1]
            self.turns = (*self.turns[:-1], (s, g, end, p, o, f))

    def tool_call(self, record: ToolCall) -> None:
        self.tool_calls += 1
        self.failures += record[4] in sc.TOOL_FAILURES
        took = record[1] - record[0]
        if took > self.slowest[0]:
            self.slowest = (took, record[3])
        if len(self.tools) < sc.MAX_TOOL_SPANS:
            self.tools += (record,)

    def attributes(self, sample_s: float) -> dict[str, Any]:
        """The sample span's totals."""
        gen, tools = self.generate_ns / 1e9, self.tools_ns / 1e9
        attrs: dict[str, Any] = {
            sc.ATTR_SAMPLE_ASSISTANT_TURNS: self.n_turns,
            sc.ATTR_SAMPLE_TOOL_CALLS_MADE: self.tool_calls,
            sc.ATTR_SAMPLE_TOOL_FAILURES: self.failures,
            sc.ATTR_SAMPLE_GENERATE_S: gen,
            sc.ATTR_SAMPLE_TOOLS_S: tools,
            sc.ATTR_SAMPLE_WAITING_S: max(0.0, sample_s - gen - tools),
        }
        if self.slowest[1]:
            tool = self.slowest[1]
            mine = [c[1] - c[0] for c in self.tools if c[3] == tool]  # of the recorded calls
            attrs[sc.ATTR_SAMPLE_SLOWEST_TOOL] = tool
            attrs[sc.ATTR_SAMPLE_SLOWEST_TOOL_S] = self.slowest[0] / 1e9
            attrs[sc.ATTR_SAMPLE_SLOWEST_TOOL_CALLS] = len(mine)
            attrs[sc.ATTR_SAMPLE_SLOWEST_TOOL_TOTAL_S] = sum(mine) / 1e9
        dropped = self.n_turns - len(self.turns) + self.tool_calls - len(self.tools)
        if dropped:
            attrs[sc.ATTR_SAMPLE_TURNS_DROPPED] = dropped
        return attrs


def emit_children(services: Services, parent: Context, sample: AgentSample) -> None:
    """The sample's turn spans under ``parent`` (its ``rollout.sample``), each with its tool calls under it."""
    tracer = services.tracer()
    offset = time.time_ns() - time.monotonic_ns()
    calls: dict[int, list[ToolCall]] = {}
    for call in sample.tools:
        calls.setdefault(call[2], []).append(call)
    for i, (start, gen_end, end, prompt, output, finish) in enumerate(sample.turns, 1):
        attrs: dict[str, Any] = {
            sc.ATTR_TURN_INDEX: i,
            sc.ATTR_TURN_PROMPT_TOKENS: prompt,
            sc.ATTR_TURN_OUTPUT_TOKENS: output,
            sc.ATTR_TURN_GENERATE_S: (gen_end - start) / 1e9,
        }
        if finish:
            attrs[sc.ATTR_GENAI_FINISH_REASONS] = (finish,)
        turn = tracer.start_span(sc.SPAN_TURN, context=parent, attributes=attrs, start_time=start + offset)
        inner = trace.set_span_in_context(turn)
        last = end
        for c in calls.pop(i, ()):
            _tool_span(tracer, inner, c, offset)
            last = max(last, c[1])
        turn.end(end_time=last + offset)
    for rest in calls.values():  # calls of a turn past the span cap: under the sample
        for c in rest:
            _tool_span(tracer, parent, c, offset)


def _tool_span(tracer: trace.Tracer, parent: Context, c: ToolCall, offset: int) -> None:
    start, end, _, tool, outcome, error, call_id, arg_chars, result_chars, args, result = c
    attrs: dict[str, Any] = {
        sc.ATTR_GENAI_OPERATION: sc.GENAI_OP_EXECUTE_TOOL,
        sc.ATTR_GENAI_TOOL_NAME: tool,
        sc.ATTR_GENAI_TOOL_TYPE: "function",
        sc.ATTR_TOOL_OUTCOME: outcome,
        sc.ATTR_TOOL_ARGS_CHARS: arg_chars,
        sc.ATTR_TOOL_RESULT_CHARS: result_chars,
    }
    if call_id:
        attrs[sc.ATTR_GENAI_TOOL_CALL_ID] = call_id
    if error:
        attrs[sc.ATTR_ERROR_TYPE] = error
    if args:
        attrs[sc.ATTR_GENAI_TOOL_ARGS] = args
    if result:
        attrs[sc.ATTR_GENAI_TOOL_RESULT] = result
    name = f"{sc.SPAN_TOOL_PREFIX} {tool}"
    span = tracer.start_span(name, context=parent, attributes=attrs, start_time=start + offset)
    if outcome in sc.TOOL_FAILURES:
        span.set_status(Status(StatusCode.ERROR, f"{outcome}: {error}"))
    span.end(end_time=end + offset)


def trace_id(traceparent: str | None) -> str | None:
    """The trace id of a W3C traceparent (``00-<trace id>-<span id>-<flags>``), the exemplar's."""
    return traceparent[3:35] if traceparent and len(traceparent) >= 55 else None


class AgentTools:
    """One agent-loop worker's tool figures: calls in flight per tool, and each finished call and sample into
    the metric store. The tool label takes the first MAX_TOOL_NAMES names seen; later ones are TOOL_OTHER."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.worker = ""
        self._names: dict[str, str] = {}
        self._declared: set[str] = set()  # tool labels whose series are declared (at most MAX_TOOL_NAMES + 1)
        self._inflight: dict[str, int] = {}
        self._lock = threading.Lock()
        self.capture = services.settings.capture_text
        self.max_text = services.settings.max_text

    def label(self, name: Any) -> str:
        """The tool label (and span name) for a name the model gave: bounded in count and length."""
        key = name if isinstance(name, str) else str(name)
        known = self._names.get(key)
        if known is not None:
            return known
        with self._lock:
            known = self._names.get(key)
            if known is not None:
                return known
            # past the cap a name is TOOL_OTHER and not kept: a model naming ever new tools grows nothing
            value = (as_text(key, 64) or sc.TOOL_OTHER) if len(self._names) < sc.MAX_TOOL_NAMES else sc.TOOL_OTHER
            if value != sc.TOOL_OTHER:
                self._names[key] = value
            new = value not in self._declared
            self._declared.add(value)
        if new:  # each outcome's series from 0, so that a tool's first burst of failures is an increase()
            for outcome in sc.TOOL_OUTCOMES:
                self.services.store.declare(sc.TOOL_CALL_SECONDS, (value, outcome))
        return value

    def started(self, tool: str) -> None:
        with self._lock:
            self._inflight[tool] = self._inflight.get(tool, 0) + 1

    def finished(self, tool: str, outcome: str, seconds: float, traceparent: str | None) -> None:
        with self._lock:
            self._inflight[tool] = self._inflight.get(tool, 1) - 1
        self.services.store.observe(sc.TOOL_CALL_SECONDS, (tool, outcome), seconds, trace_id(traceparent))

    def sample_done(self, mode: str, sample: AgentSample, sample_s: float) -> None:
        store = self.services.store
        store.observe(sc.SAMPLE_TURNS, (mode,), float(sample.n_turns))
        gen, tools = sample.generate_ns / 1e9, sample.tools_ns / 1e9
        for part, seconds in (
            (sc.PART_GENERATE, gen),
            (sc.PART_TOOLS, tools),
            (sc.PART_OTHER, max(0.0, sample_s - gen - tools)),
        ):
            store.inc(sc.ROLLOUT_PART_SECONDS, (mode, part), seconds)

    def text(self, value: Any) -> str:
        """A tool call's argument or result text for its span: only with VERL_OTEL_CAPTURE_TEXT=1."""
        return (as_text(value, self.max_text) or "") if self.capture else ""

    def readings(self) -> Iterable[Reading]:
        with self._lock:
            rows = list(self._inflight.items())
        for tool, n in rows:
            yield sc.TOOL_CALLS_INFLIGHT, (self.worker, tool), float(n)
