"""The tokens of a training step's batch (prompt and response, counted once a step by the hooks) and what they
make of each phase: the tokens it handled and its seconds per 1k tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl_otel import semconv as sc


def per_1k(seconds: float, tokens: int) -> float | None:
    """Seconds per 1000 tokens; None without tokens."""
    return seconds * 1000.0 / tokens if tokens > 0 else None


@dataclass(frozen=True, slots=True)
class StepTokens:
    prompt: int
    response: int
    #: (prompt, response) of the mini-batch the phases handle now, when a step trains several in turn (v1's
    #: parameter_sync_step); None: the phases handle the whole step's batch
    batch: tuple[int, int] | None = None

    def plus(self, prompt: int, response: int, separate: bool = False) -> StepTokens:
        """Another generated batch in the same step: a rollout that ran more than once (its phases handle the
        sum), or, ``separate``, a mini-batch trained on its own (its phases handle it alone)."""
        return StepTokens(self.prompt + prompt, self.response + response, (prompt, response) if separate else None)

    def of_phase(self, phase: str) -> int | None:
        """The tokens ``phase`` handled: rollout generated the responses, the others read the whole batch;
        None for a phase that does not process tokens."""
        if phase not in sc.TOKEN_PHASES:
            return None
        return self.response if phase in sc.GENERATING_PHASES else self.prompt + self.response

    def phase_attributes(self, phase: str, seconds: float) -> dict[str, Any]:
        tokens = (self if self.batch is None else StepTokens(*self.batch)).of_phase(phase)
        if tokens is None:
            return {}
        attrs: dict[str, Any] = {sc.ATTR_PHASE_TOKENS: tokens}
        rate = per_1k(seconds, tokens)
        if rate is not None:
            attrs[sc.ATTR_PHASE_S_PER_1K_TOKENS] = rate
        return attrs

    def step_attributes(self) -> dict[str, Any]:
        return {sc.ATTR_STEP_PROMPT_TOKENS: self.prompt, sc.ATTR_STEP_RESPONSE_TOKENS: self.response}
