"""Was a slow phase slow because it had more tokens to handle? Each phase's tokens and seconds per token
against their medians over the compared steps (the phase spans' ``verl.phase.tokens``)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from verl_otel.analysis.step_traces import StepTrace

TIMES = "\u00d7"


@dataclass(frozen=True)
class TokenMedian:
    tokens: float
    s_per_token: float


@dataclass(frozen=True)
class TokenView:
    """A phase of one step against its medians: how many more tokens, how much slower per token."""

    phase: str
    tokens: int
    token_ratio: float  # its tokens / the median's
    per_token_ratio: float  # its seconds per token / the median's

    def text(self) -> str:
        return f"{self.token_ratio:.1f}{TIMES} the median's tokens, per-token time {self.per_token_ratio:.1f}{TIMES}"

    @property
    def explained_by_tokens(self) -> bool:
        """More tokens, not slower ones: the per-token time is within 10% of the median's."""
        return self.token_ratio >= 1.1 and self.per_token_ratio < 1.1


def token_medians(steps: list[StepTrace]) -> dict[str, TokenMedian]:
    """Per phase, over the steps where it carries tokens: the median tokens and median seconds per token."""
    out: dict[str, TokenMedian] = {}
    for phase in {p for s in steps for p in s.tokens}:
        have = [s for s in steps if s.tokens.get(phase) and phase in s.phases]
        if have:
            out[phase] = TokenMedian(
                statistics.median(s.tokens[phase] for s in have),
                statistics.median(s.phases[phase] / s.tokens[phase] for s in have),
            )
    return out


def view(step: StepTrace, phase: str, medians: dict[str, TokenMedian]) -> TokenView | None:
    med, tokens = medians.get(phase), step.tokens.get(phase)
    if med is None or not tokens or med.tokens <= 0 or med.s_per_token <= 0 or phase not in step.phases:
        return None
    return TokenView(phase, tokens, tokens / med.tokens, step.phases[phase] / tokens / med.s_per_token)


def per_token_ratios(step: StepTrace, medians: dict[str, TokenMedian]) -> dict[str, float]:
    """Each token phase's per-token time against its median (1.0: as fast per token as usual)."""
    views = (view(step, p, medians) for p in step.tokens)
    return {v.phase: v.per_token_ratio for v in views if v is not None}
