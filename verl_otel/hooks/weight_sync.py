"""Weight syncs watched for stalls in the processes that do them: the actor worker's side
(``ActorRolloutRefWorker.update_weights``: export, then send or load into its colocated engine) and a rollout
replica's side (``CheckpointEngineWorker.update_weights``: receive and load). No span here: the trainer's
``update_weights`` phase times the sync; a stuck one is dumped where it is stuck, under that phase's name."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from verl_otel import semconv as sc
from verl_otel.hooks._safe import on_exit, safe
from verl_otel.hooks.stall_watch import unwatch, watch


async def _watched(coro: Coroutine[Any, Any, Any], call: str, step: Any) -> Any:
    token = safe(watch, call, None, sc.PHASE_UPDATE_WEIGHTS, step if isinstance(step, int) else -1)
    with on_exit(unwatch, token):
        return await coro


def _wrap(call: str) -> Callable[..., Any]:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        result = wrapped(*args, **kwargs)
        if not isinstance(result, Coroutine):  # another verl's synchronous method: nothing to watch
            return result
        return _watched(result, call, kwargs.get("global_steps", args[0] if args else None))

    return wrapper


actor_update_weights = _wrap(sc.CALL_WEIGHT_SEND)
replica_update_weights = _wrap(sc.CALL_WEIGHT_RECEIVE)
