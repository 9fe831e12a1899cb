"""The long-tail request of ``--slow rollout_sample@K=S`` and the engine hang of ``--hang rollout@K=S`` with real
vLLM (see :mod:`verl_otel.demo.vllm_slow`): a vLLM logits processor, loaded by name in vLLM's engine process
(engine argument ``logits_processors``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from verl_otel.demo.slow import planted_hang
from verl_otel.demo.vllm_slow import DEADLINE_KEY, HANG_KEY


class LongTail(AdapterLogitsProcessor):
    """Until its deadline a tail request cannot end (EOS masked); after it, EOS is its only token."""

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        super().__init__(vllm_config, device, is_pin_memory)
        eos = getattr(vllm_config.model_config.hf_config, "eos_token_id", None)
        self.eos = [eos] if isinstance(eos, int) else list(eos or [])

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params: Any) -> Callable[[list[int], Any], Any] | None:
        extra = getattr(params, "extra_args", None) or {}
        deadline = extra.get(DEADLINE_KEY)
        hang_at, hang_s = extra.get(HANG_KEY) or (0.0, 0.0)  # (wall-clock time from which it hangs, seconds)
        if (deadline is None or not self.eos) and not hang_s:
            return None
        eos, hung = self.eos, [not hang_s]

        def tail(_output_ids: list[int], logits: Any) -> Any:
            if not hung[0] and time.time() >= float(hang_at):
                hung[0] = True
                planted_hang(float(hang_s))  # the engine's step waits here: no request of it moves on
            if deadline is None or not eos:
                return logits
            if time.time() < float(deadline):
                logits[eos] = float("-inf")
            else:
                logits.fill_(float("-inf"))
                logits[eos] = 0.0
            return logits

        return tail
