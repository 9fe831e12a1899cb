"""Scale of an agent-loop worker's step (bench/scale.py runs this in a process of its own per size, since it sets
environment variables and the runtime): N samples through the real hooks (``run_agent_loop`` around each sample,
one engine request through ``client_generate``), the batch's spans at its end, and the engine's ``llm_request``
spans made on the real ``runtime.engine_provider`` under each request's carried context, as vLLM makes them.

With ``in-flight`` (a 4th argument) every sample of a step is in flight at once, as verl's worker runs them (a task
each, gathered on an event loop; the stand-in loop suspends once before its request): the objects each holds alive
are then walked by every full garbage collection, whose cost grows with the objects in flight.

Prints ``SCALE_ROLLOUT {json}``: ``sample_us`` (our cost per sample: hooked minus the same loop unhooked, batch end
included, in this process' CPU time, all its threads, averaged over the timed steps: on a shared machine the wall
clock also counts the other jobs, and a best-of-N wall time favours the sizes whose steps are short enough to fall
between them), ``sample_wall_us`` (the same from the best wall-clock step, as this figure was before),
``bytes_per_step`` (the trace file's growth per step: the project's OTLP/JSON writer) and
``spans_per_step``, and ``series`` (the worker's /metrics page after the run).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def _drive(coro: Any) -> Any:
    """Run a coroutine that never suspends (our stand-in agent loop awaits nothing)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("the stand-in agent loop suspended")


TURNS = 3  # --agent: turns per sample, each a generate call and a tool call


async def _all_at_once(samples: list[Any]) -> None:
    """Every sample of the step in flight at once, as verl's agent-loop worker runs them (a task each, gathered)."""
    await asyncio.gather(*samples)


def main(n: int, steps: int, replicas: int, in_flight: bool = False, agent: bool = False) -> dict[str, float]:
    data = Path(tempfile.mkdtemp(prefix="verl-otel-scale-"))
    os.environ.update(VERL_OTEL_DIR=str(data), VERL_OTEL_CONSOLE="0")
    from omegaconf import OmegaConf

    from verl_otel import runtime, trackers
    from verl_otel import semconv as sc
    from verl_otel.hooks import agent_loop, engine, rollout, verl_objects
    from verl_otel.telemetry.propagation import extract

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from scale_trainer import series

    runtime.reset_for_tests()
    rt = runtime.current()
    m = trackers.current()
    TRACKER = m.rollout  # noqa: N806
    TRACKER.worker = 0  # what rollout._wire reads from Ray's actor name
    m.wire(sc.PROCESS_ROLE_AGENT_LOOP, worker_index=0, describe=verl_objects.sample_attributes)

    class Client:  # what the hook reads of verl's LLMServerClient: its (OmegaConf) config
        config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "vllm"}}})

    client = Client()
    carried: list[str] = []
    params = {"temperature": 1.0, "top_p": 1.0, "logprobs": True}

    def generate(**kwargs: Any) -> None:  # the server call: keeps the context the request carried
        extra = kwargs["sampling_params"].get("extra_args") or {}
        if sc.TRACEPARENT_KEY in extra:
            carried.append(extra[sc.TRACEPARENT_KEY])

    # --agent: verl's tool agent loop as its hooks see it, TURNS turns of a generate call and one tool call each
    # (its AgentState handlers and _call_tool stand in as plain coroutines: the cost measured is the hooks')
    tool_loop = SimpleNamespace(tools={"search": object()}, max_tool_response_length=256)
    call = SimpleNamespace(name="search", arguments='{"query": "x"}', tool_call_id=None)
    answer = (SimpleNamespace(text="found"), 0.0, {})

    async def generating(*_: Any) -> Any:
        if in_flight:
            await asyncio.sleep(0)
        generate(sampling_params=params)

    async def tool(*_: Any) -> Any:
        return answer

    async def processing_tools(data: Any) -> None:
        await agent_loop.call_tool(tool, tool_loop, (call, {}, data), {})

    async def hooked_loop(_self: Any, trajectory: Any) -> None:  # verl's agent loop, one engine request
        if agent:
            data = SimpleNamespace(prompt_ids=(), response_ids=(), _active_tools=tool_loop.tools)
            for _ in range(TURNS):
                await agent_loop.generating_turn(generating, tool_loop, (data, params), {})
                await agent_loop.processing_tools(processing_tools, tool_loop, (data,), {})
            return
        if in_flight:
            await asyncio.sleep(0)  # the request's answer comes later: the others start meanwhile
        engine.client_generate(generate, client, (), {"sampling_params": params})

    async def plain_loop(_self: Any, trajectory: Any) -> None:
        for _ in range(TURNS if agent else 1):
            if in_flight:
                await asyncio.sleep(0)
            generate(sampling_params=params)
            if agent:
                await tool()

    def one_step(step: int, hooked: bool) -> tuple[float, float]:
        parent = f"00-{random.getrandbits(128):032x}-{random.getrandbits(64):016x}-01"
        trajs = [{"step": step, "sample_index": i // 4, "rollout_n": i % 4, "validate": False} for i in range(n)]
        loop = asyncio.new_event_loop() if in_flight else None
        t0, c0 = time.perf_counter(), time.process_time()
        if hooked:
            TRACKER.batch_started(sc.MODE_TRAIN, step, n, parent)  # what the dispatch hook calls
        # one sample after the other, or (in flight) all started, then gathered
        samples = (
            rollout.run_agent_loop(hooked_loop, None, (None, traj), {}) if hooked else plain_loop(None, traj)
            for traj in trajs
        )
        if loop is not None:
            loop.run_until_complete(_all_at_once(list(samples)))
        else:
            for sample in samples:
                _drive(sample)
        took = time.perf_counter() - t0, time.process_time() - c0
        if loop is not None:
            loop.close()
        return took

    def engine_spans(step: int) -> None:
        """The rollout servers' side, as vLLM makes its request spans (not timed: another process)."""
        tracers = [rt.engine_provider({sc.ATTR_ENGINE_REPLICA: r}) for r in range(replicas)]
        names = [p.get_tracer("vllm") for p in tracers if p is not None]
        now = time.time_ns()
        for i, tp in enumerate(carried):
            dur = random.randint(10**8, 10**10)
            span = names[i % len(names)].start_span(
                sc.SPAN_ENGINE_REQUEST,
                context=extract(tp),
                start_time=now,
                attributes={
                    sc.ENGINE_ATTR_REQUEST_ID: f"req-{step}-{i}",
                    sc.ENGINE_ATTR_QUEUE: 0.01,
                    sc.ENGINE_ATTR_PREFILL: 0.05,
                    sc.ENGINE_ATTR_DECODE: dur / 1e9,
                    sc.ENGINE_ATTR_TTFT: 0.06,
                    sc.ENGINE_ATTR_E2E: dur / 1e9,
                    sc.ENGINE_ATTR_PROMPT_TOKENS: 512,
                    sc.ENGINE_ATTR_COMPLETION_TOKENS: 2048,
                },
            )
            span.end(end_time=now + dur)
        carried.clear()

    plain, ours = [], []
    for step in range(steps + 1):  # step 0 warms up (the first batch wires the worker): not timed
        plain.append(one_step(step, hooked=False))
        ours.append(one_step(step, hooked=True))
        engine_spans(step)
    plain, ours = plain[1:], ours[1:]
    if rt._engine_provider is not None:
        rt._engine_provider.force_flush()
    rt.flush_wait(60)
    if rt._engine_provider is not None:
        rt._engine_provider.shutdown()  # what is still held (the last step's) goes out
    rt.flush_wait(60)
    TRACKER.batch_started(sc.MODE_VALIDATE, steps, 1, None)  # a worker validates too: its page has both modes
    files = [p for p in data.glob("traces.jsonl*") if not p.name.endswith(".lock")]
    size = sum(p.stat().st_size for p in files)
    spans = sum(line.count(b'"spanId"') for p in files for line in p.read_bytes().splitlines())
    cpu = sum(o[1] - p[1] for o, p in zip(ours, plain, strict=True)) / len(ours)
    return {
        "sample_us": max(0.0, cpu / n * 1e6),
        "sample_wall_us": max(0.0, (min(o[0] for o in ours) - min(p[0] for p in plain)) / n * 1e6),
        "bytes_per_step": size / (steps + 1),
        "spans_per_step": spans / (steps + 1),
        "series": series(rt.store),  # this worker's /metrics page
    }


if __name__ == "__main__":
    n, steps, replicas = (int(x) for x in sys.argv[1:4])
    flags = sys.argv[4:]
    print("SCALE_ROLLOUT " + json.dumps(main(n, steps, replicas, "in-flight" in flags, "agent" in flags)), flush=True)
    os._exit(0)  # the runtime's exit flush has nothing left to do
