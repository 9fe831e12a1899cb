"""verl's tool agent loop (``ToolAgentLoop``, verl 0.9.1): each assistant turn and each tool call of a sample,
recorded on the sample's context (hooks/rollout.py) as plain tuples, and each tool call's outcome.

verl turns every tool failure into a text the model reads back; the outcome tells them apart: the name is not
one of the sample's tools (unknown tool), the arguments are not a JSON object (invalid arguments), the tool
raised (its exception type is caught by the hooks on ``FunctionTool.call`` and the tool class' own
``create``/``execute``/``release``, hooked when the loop first calls a tool of that class), or the answer was
longer than ``max_tool_response_length`` (truncated, still a success). A tool call is watched by the stall
watch under the phase ``execute_tool``, its call naming the tool and the sample.
"""

from __future__ import annotations

import contextvars
import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel.hooks._safe import safe
from verl_otel.hooks.rollout import _SampleCtx, current_sample
from verl_otel.hooks.stall_watch import unwatch, watch
from verl_otel.telemetry.agent import AgentSample

# the running tool call's error type, set by the tool-method hooks (a one-item list per call; None outside one)
_RAISED: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("verl_otel_tool_raised", default=None)
_TOOL_METHODS = ("create", "execute", "release")
_ERROR_PREFIX, _BAD_JSON_PREFIX = "Error executing tool '", "Invalid JSON in arguments for '"


def _agent(ctx: _SampleCtx) -> AgentSample:
    if ctx.agent is None:
        index = ctx.trajectory.get("sample_index") if isinstance(ctx.trajectory, dict) else None
        ctx.agent = AgentSample(index if isinstance(index, int) else None)
    return ctx.agent


# -- turns ---------------------------------------------------------------------------------------------------
def generating_turn(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    ctx = current_sample()
    agent_data = args[0] if args else kwargs.get("agent_data")
    if ctx is None or agent_data is None:
        return wrapped(*args, **kwargs)
    return _timed_turn(wrapped(*args, **kwargs), ctx, agent_data)


async def _timed_turn(coro: Coroutine[Any, Any, Any], ctx: _SampleCtx, agent_data: Any) -> Any:
    prompt = safe(len, getattr(agent_data, "prompt_ids", ())) or 0
    ctx.finish = ""  # a turn listens for its generate call's stop reason
    start = time.monotonic_ns()
    try:
        return await coro
    finally:
        safe(_turn_done, ctx, agent_data, start, prompt)


def _turn_done(ctx: _SampleCtx, agent_data: Any, start: int, prompt: int) -> None:
    finish, ctx.finish = ctx.finish or "", None
    _agent(ctx).turn(start, time.monotonic_ns(), prompt, len(getattr(agent_data, "response_ids", None) or ()), finish)


def noted_output(result: Any) -> Any:
    """verl's LLM client's ``generate`` (hooks/engine.py), inside a tool agent loop's turn: its output's stop reason
    is kept for the turn (``aborted``: a weight sync cut it, and the turn holds what was generated). Other calls
    (a single-turn loop's) are returned as they are: nothing is added to their path."""
    ctx = current_sample()
    if not isinstance(result, Coroutine) or ctx is None or ctx.finish is None:
        return result
    return _noting(result, ctx)


async def _noting(coro: Coroutine[Any, Any, Any], ctx: _SampleCtx) -> Any:
    output = await coro
    safe(_note_finish, output, ctx)
    return output


def _note_finish(output: Any, ctx: _SampleCtx) -> None:
    """The turn's stop reason: its last call's (verl resends a request a weight sync aborted; the resumed call's)."""
    reason = getattr(output, "stop_reason", None)
    if ctx.finish is not None and reason:
        ctx.finish = str(reason)[: sc.MAX_FINISH_CHARS]


def processing_tools(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    ctx = current_sample()
    if ctx is None:
        return wrapped(*args, **kwargs)
    return _timed_tools(wrapped(*args, **kwargs), ctx)


async def _timed_tools(coro: Coroutine[Any, Any, Any], ctx: _SampleCtx) -> Any:
    start = time.monotonic_ns()
    try:
        return await coro
    finally:
        safe(lambda: _agent(ctx).tools_done(start, time.monotonic_ns()))


# -- tool calls ----------------------------------------------------------------------------------------------
def call_tool(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``ToolAgentLoop._call_tool(tool_call, tools_kwargs, agent_data)``."""
    ctx = current_sample()
    tool_call = args[0] if args else kwargs.get("tool_call")
    agent_data = args[2] if len(args) > 2 else kwargs.get("agent_data")
    if ctx is None or tool_call is None:
        return wrapped(*args, **kwargs)
    return _timed_call(wrapped, args, kwargs, ctx, instance, tool_call, agent_data)


async def _timed_call(
    wrapped: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    ctx: _SampleCtx,
    loop: Any,
    tool_call: Any,
    agent_data: Any,
) -> Any:
    tools = trackers.current().agent_tools
    name = getattr(tool_call, "name", "")
    active = getattr(agent_data, "_active_tools", None)  # the sample's selection (verl's per-sample tools) ...
    active = getattr(loop, "tools", None) if active is None else active  # ... or the loop's
    active = active if isinstance(active, dict) else {}
    known = name in active
    label = safe(tools.label, name if known else sc.TOOL_OTHER) or sc.TOOL_OTHER
    if known:
        safe(_hook_tool_class, active[name])
    raised: list[str] = []
    _RAISED.set(raised)  # this call's own task (verl gathers the calls): the tool-method hooks write here
    token = safe(_watch, ctx, label)
    safe(tools.started, label)
    start = time.monotonic_ns()
    result: Any = None
    try:
        result = await wrapped(*args, **kwargs)
        return result
    finally:
        end = time.monotonic_ns()
        safe(unwatch, token)
        safe(_call_done, ctx, loop, tool_call, known, label, raised, result, start, end)


def _watch(ctx: _SampleCtx, label: str) -> int | None:
    index = _agent(ctx).index
    call = f"{sc.SPAN_TOOL_PREFIX} {label}" + ("" if index is None else f" (sample #{index})")
    step = ctx.trajectory.get("step") if isinstance(ctx.trajectory, dict) else None
    try:
        number = int(step) if step is not None else -1  # verl's may be a numpy integer
    except (TypeError, ValueError):
        number = -1
    return watch(call, ctx.parent, sc.SPAN_TOOL_PREFIX, number)


def _outcome(loop: Any, tool_call: Any, known: bool, raised: list[str], text: str) -> tuple[str, str]:
    """(outcome, error type) of a finished call."""
    if not known:
        return sc.TOOL_UNKNOWN, sc.TOOL_UNKNOWN
    if text.startswith(_BAD_JSON_PREFIX) or (text.startswith(_ERROR_PREFIX) and not _object_args(tool_call)):
        return sc.TOOL_BAD_ARGS, sc.TOOL_BAD_ARGS  # not JSON, or JSON that is no object (the tool got a string)
    if raised or text.startswith(_ERROR_PREFIX):
        return sc.TOOL_RAISED, raised[0] if raised else "_OTHER"
    limit = getattr(loop, "max_tool_response_length", None)
    if isinstance(limit, int) and len(text) > limit:
        return sc.TOOL_TRUNCATED, ""
    return sc.TOOL_OK, ""


def _object_args(tool_call: Any) -> bool:
    """Whether the call's arguments are a JSON object (parsed only for a failed call)."""
    try:
        return isinstance(json.loads(getattr(tool_call, "arguments", "")), dict)
    except (ValueError, TypeError):
        return False


def _call_done(
    ctx: _SampleCtx,
    loop: Any,
    tool_call: Any,
    known: bool,
    label: str,
    raised: list[str],
    result: Any,
    start: int,
    end: int,
) -> None:
    tools = trackers.current().agent_tools
    response = result[0] if isinstance(result, tuple) and result else None
    text = getattr(response, "text", None) or ""
    text = text if isinstance(text, str) else ""
    if result is None:  # cancelled, or raised past verl's own handler
        outcome, error = sc.TOOL_RAISED, raised[0] if raised else "_OTHER"
    else:
        outcome, error = _outcome(loop, tool_call, known, raised, text)
    arguments = getattr(tool_call, "arguments", "")
    agent = _agent(ctx)
    record = (
        start,
        end,
        agent.n_turns,
        label,
        outcome,
        error,
        str(getattr(tool_call, "tool_call_id", None) or ""),
        len(arguments) if isinstance(arguments, str) else 0,
        len(text),
        tools.text(arguments) if tools.capture else "",
        tools.text(text) if tools.capture else "",
    )
    agent.tool_call(record)
    tools.finished(label, outcome, (end - start) / 1e9, ctx.parent)


# -- the tools' own methods: their exception's type ----------------------------------------------------------
def tool_method(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``FunctionTool.call`` and a tool class' ``create``/``execute``/``release`` (coroutines)."""
    box = _RAISED.get()
    if box is None:
        return wrapped(*args, **kwargs)
    return _noting_raise(wrapped(*args, **kwargs), box)


async def _noting_raise(coro: Coroutine[Any, Any, Any], box: list[str]) -> Any:
    try:
        return await coro
    except Exception as exc:
        if not box:
            box.append(type(exc).__qualname__)
        raise


def _hook_tool_class(tool: Any) -> None:
    """A ``BaseTool`` subclass' own create/execute/release, hooked through the registry on first use (so
    ``uninstrument()`` restores them with the rest); ``FunctionTool.call`` is a target of its own."""
    cls = type(tool)
    if cls.__name__ == "FunctionTool":
        return
    import wrapt

    from verl_otel.hooks import registry

    missing = [m for m in _TOOL_METHODS if m in cls.__dict__ and not isinstance(cls.__dict__[m], wrapt.ObjectProxy)]
    if not missing or "<locals>" in cls.__qualname__:
        return
    registry.install(
        registry.HookTarget(
            cls.__module__,
            f"{cls.__qualname__}.{m}",
            tool_method,
            "the tool's exception type on its calls",
            process_role=sc.PROCESS_ROLE_AGENT_LOOP,
        )
        for m in missing
    )
