"""``--slow`` with the real vLLM rollout: the delays happen inside vLLM, where a user's slow step would.

- ``rollout_sample@K=S``: one training request of step K is a long tail that really decodes for about S
  seconds: verl's server asks vLLM for as many tokens as the context holds, and ``LongTail`` (a vLLM logits
  processor in :mod:`verl_otel.demo.vllm_long_tail`, an engine argument) keeps the request from ending until
  its deadline, then ends it with EOS. vLLM's own ``llm_request`` span shows it as decode time and output
  tokens; verl keeps the first ``response_length`` tokens, as it does with any long answer.
- ``rollout@K=S``: each training request of step K waits S seconds in verl's server before vLLM's engine
  sees it (as with the stand-in: time in the sample, none in the engine).
- ``--hang rollout@K=S``: vLLM's engine itself stops for S seconds in step K's first training request (the same
  logits processor blocks the engine's step: requests running, no token out, as a stuck engine core): at its
  first token, or, when it is also the step's long tail, midway through the tail's time left beside the hang
  (the other requests are done by then: only the tail waits, and still ends at its deadline).

Hooked by :mod:`verl_otel.demo.vllm_plugin` in the rollout server's process; the logits processor lives in a
module of its own, loaded by vLLM's engine process by its name."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from typing import Any

from verl_otel.demo.slow import RequestDelays, SlowSpec

#: the engine argument that loads it (``module:Class``; one string: verl would turn a list into ``str(list)``)
LOGITS_PROCESSOR = "verl_otel.demo.vllm_long_tail:LongTail"
#: the request's deadline (a wall-clock time: vLLM's engine runs in its own process) in ``extra_args``
DEADLINE_KEY = "verl_otel_demo_decode_until"
#: ``--hang rollout``: (wall-clock time from which it hangs, seconds) of the engine's hang, in ``extra_args``
HANG_KEY = "verl_otel_demo_engine_hang"


def overrides(spec: SlowSpec, hang: SlowSpec | None = None) -> list[str]:
    """The engine argument the long tail and the engine hang need, only when one is asked for."""
    if not spec.any("rollout_sample") and not (hang is not None and hang.any("rollout")):
        return []
    return [f"+actor_rollout_ref.rollout.engine_kwargs.vllm.logits_processors='{LOGITS_PROCESSOR}'"]


class _Process:
    """The rollout server of this process (one per process) and what ``--slow`` asks of its requests."""

    def __init__(self) -> None:
        self.delays = RequestDelays()
        self.server: Any = None


_process = _Process()


def remembering(run_server: Callable[..., Any]) -> Callable[..., Any]:
    """``vLLMHttpServer.run_server``, remembering the server, whose ``global_steps`` says the step."""

    @functools.wraps(run_server)
    async def remembers(server: Any, *args: Any, **kwargs: Any) -> Any:
        _process.server = server
        return await run_server(server, *args, **kwargs)

    return remembers


def engine_generate(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``AsyncLLM.generate(prompt, sampling_params, request_id, ...)``, called by verl's server."""
    params: Any = args[1] if len(args) > 1 else kwargs.get("sampling_params")
    if float(getattr(params, "temperature", 0) or 0) <= 0:  # validation is greedy: only training is slowed
        return wrapped(*args, **kwargs)
    step = int(getattr(_process.server, "global_steps", None) or 0) + 1  # weights of step k-1 generate step k
    tail = _process.delays.tail_s(step)
    hang = _process.delays.hang_s(step)
    if hang:  # in the tail: once the step's other requests are done, and with decode time left after it
        start = time.time() + max(0.0, tail - hang) / 2
        params.extra_args = {**(params.extra_args or {}), HANG_KEY: [start, hang]}
    if tail:
        prompt = args[0] if args else kwargs.get("prompt")
        prompt_len = len(prompt.get("prompt_token_ids") or []) if isinstance(prompt, dict) else 0
        # as many tokens as the context holds (verl keeps response_length of them); LongTail ends it on time
        params.max_tokens = max(1, int(instance.model_config.max_model_len) - prompt_len)
        params.extra_args = {**(params.extra_args or {}), DEADLINE_KEY: time.time() + tail}
    delay = _process.delays.rollout_s(step)
    return _after(delay, wrapped(*args, **kwargs)) if delay else wrapped(*args, **kwargs)


async def _after(delay: float, outputs: Any) -> Any:
    await asyncio.sleep(delay)
    async for output in outputs:
        yield output


def asked() -> bool:
    return _process.delays.spec.any("rollout", "rollout_sample") or _process.delays.hang.any("rollout")
