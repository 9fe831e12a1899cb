"""Tokens per step and phase (issue 28, part 1): counted from verl's real generated batch, carried by the
phase spans as tokens and seconds per 1k tokens, the gauge per phase, and slow-steps telling "more tokens"
from "slower per token" (and ranking by the latter with --per-token)."""

import pytest
import torch
from verl import DataProto

from verl_otel import semconv as sc
from verl_otel.analysis import slow_steps
from verl_otel.analysis.step_traces import Span, StepTrace, build_step
from verl_otel.hooks.verl_batches import token_counts
from verl_otel.process.metrics import MetricStore
from verl_otel.telemetry.step_events import StepResult
from verl_otel.telemetry.step_tokens import StepTokens
from verl_otel.telemetry.trainer_metrics import TrainerMetrics


def _generated(with_response_mask: bool) -> DataProto:
    # 2 rows, prompt width 3 (left padded), response width 4 (right padded)
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    response_mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    tensors = {
        "prompts": torch.zeros(2, 3, dtype=torch.long),
        "responses": torch.zeros(2, 4, dtype=torch.long),
        "attention_mask": torch.cat([prompt_mask, response_mask], dim=1),
    }
    if with_response_mask:
        tensors["response_mask"] = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1]])  # e.g. tool tokens masked out
    return DataProto.from_dict(tensors=tensors)


def test_token_counts_of_a_real_generated_batch():
    assert token_counts(_generated(False)) == (5, 6)
    assert token_counts(_generated(True)) == (5, 5)  # verl's response_mask, when it has one, counts
    assert token_counts(DataProto.from_dict(tensors={"input_ids": torch.zeros(2, 3)})) is None
    assert token_counts(object()) is None


def test_phase_attributes_by_what_the_phase_handles():
    t = StepTokens(prompt=300, response=700)
    assert t.phase_attributes(sc.PHASE_ROLLOUT, 1.4) == {
        sc.ATTR_PHASE_TOKENS: 700,
        sc.ATTR_PHASE_S_PER_1K_TOKENS: pytest.approx(2.0),
    }
    assert t.phase_attributes(sc.PHASE_UPDATE_ACTOR, 3.0)[sc.ATTR_PHASE_S_PER_1K_TOKENS] == pytest.approx(3.0)
    assert t.phase_attributes(sc.PHASE_ADV, 1.0) == {} and t.phase_attributes(sc.PHASE_VALIDATE, 1.0) == {}
    assert t.plus(10, 20) == StepTokens(310, 720)
    assert StepTokens(0, 0).phase_attributes(sc.PHASE_ROLLOUT, 1.0) == {sc.ATTR_PHASE_TOKENS: 0}


def test_mini_batches_trained_in_turn_give_their_phases_their_own_tokens():
    """v1's parameter_sync_step: the step counts both mini-batches, each one's phases only its own."""
    t = StepTokens(0, 0).plus(100, 300, separate=True)
    assert t.phase_attributes(sc.PHASE_UPDATE_ACTOR, 0.4)[sc.ATTR_PHASE_TOKENS] == 400
    t = t.plus(50, 150, separate=True)
    assert t.step_attributes() == {sc.ATTR_STEP_PROMPT_TOKENS: 150, sc.ATTR_STEP_RESPONSE_TOKENS: 450}
    assert t.phase_attributes(sc.PHASE_ROLLOUT, 1.5) == {
        sc.ATTR_PHASE_TOKENS: 150,
        sc.ATTR_PHASE_S_PER_1K_TOKENS: pytest.approx(10.0),
    }
    assert t.of_phase(sc.PHASE_UPDATE_ACTOR) == 600  # the gauge: the step's seconds over the step's tokens
    assert t.plus(1, 2).phase_attributes(sc.PHASE_REF, 1.0)[sc.ATTR_PHASE_TOKENS] == 603  # a re-run: the sum


def test_the_gauge_per_token_phase():
    store = MetricStore()
    metrics = TrainerMetrics(store)
    phases = {sc.PHASE_ROLLOUT: 1.4, sc.PHASE_UPDATE_ACTOR: 3.0, sc.PHASE_ADV: 0.1}
    metrics.on_step_end(StepResult(2, 5.0, phases, "ab" * 16, False, StepTokens(300, 700)))
    got = {labels: v for m, labels, v in store.readings() if m is sc.PHASE_S_PER_1K_TOKENS}
    assert got == {(sc.PHASE_ROLLOUT,): pytest.approx(2.0), (sc.PHASE_UPDATE_ACTOR,): pytest.approx(3.0)}
    metrics.on_step_end(StepResult(3, 9.0, phases | {sc.PHASE_ROLLOUT: 9.0}, "cd" * 16, False, None))
    again = {labels: v for m, labels, v in store.readings() if m is sc.PHASE_S_PER_1K_TOKENS}
    assert again == got  # a step without counts leaves the last value, does not make one up


def test_phase_spans_tokens_are_read_back():
    root = Span("t" * 32, "r" * 16, "", sc.SPAN_STEP, 0, 10**10, {sc.ATTR_GLOBAL_STEP: 4})
    spans = [root]
    for i, (name, tokens) in enumerate(((sc.PHASE_UPDATE_ACTOR, "1000"), (sc.PHASE_UPDATE_ACTOR, 1000.0))):
        attrs = {sc.ATTR_PHASE: name, sc.ATTR_PHASE_TOKENS: tokens}
        spans.append(Span("t" * 32, f"{i:016x}", root.span_id, name, 0, 10**9, attrs))
    spans.append(Span("t" * 32, "a" * 16, root.span_id, sc.PHASE_ADV, 0, 10**9, {sc.ATTR_PHASE: sc.PHASE_ADV}))
    step = build_step(spans)
    assert step is not None and step.tokens == {sc.PHASE_UPDATE_ACTOR: 2000}


def _steps() -> list[StepTrace]:
    """Six steps of update_actor 1 s for 1000 tokens; step 3 handled twice the tokens in 2.1 s (more tokens,
    per-token time 1.05x), step 5 its usual tokens in 2.0 s (per-token time 2x)."""
    out = []
    for n in range(1, 7):
        actor_s, tokens = {3: (2.1, 2000), 5: (2.0, 1000)}.get(n, (1.0, 1000))
        st = StepTrace(f"{n:032x}", n, n * 10**10, actor_s + 1.0, "verl", False)
        st.phases = {sc.PHASE_ROLLOUT: 1.0, sc.PHASE_UPDATE_ACTOR: actor_s}
        st.tokens = {sc.PHASE_ROLLOUT: 500, sc.PHASE_UPDATE_ACTOR: tokens}
        out.append(st)
    return out


def test_a_slow_phase_explained_by_more_tokens_or_not():
    ranking = slow_steps.rank(_steps(), 2)
    first, second = ranking.verdicts
    assert (first.step.global_step, second.step.global_step) == (3, 5)
    more = slow_steps.cause_text(first)
    assert "update_actor 2.1\u00d7 its median" in more
    assert "2.0\u00d7 the median's tokens, per-token time 1.1\u00d7" in more  # 1.05 shown as 1.1
    slower = slow_steps.cause_text(second)
    assert "1.0\u00d7 the median's tokens, per-token time 2.0\u00d7" in slower and "not slower" not in slower
    js = slow_steps.to_json(ranking, None)
    assert js[0]["cause"]["token_ratio"] == 2.0 and js[0]["cause"]["per_token_ratio"] == pytest.approx(1.05)
    assert js[1]["cause"]["explained_by_tokens"] is False and js[1]["phase_tokens"][sc.PHASE_UPDATE_ACTOR] == 1000


def test_per_token_ranking_puts_the_slower_per_token_step_first():
    ranking = slow_steps.rank(_steps(), 2, per_token=True)
    assert [v.step.global_step for v in ranking.verdicts] == [5, 3]
    text = slow_steps.to_text(ranking, None)
    assert "per-token time vs median: update_actor 2.0\u00d7, rollout 1.0\u00d7" in text


def test_exactly_more_tokens_is_said_so():
    steps = _steps()
    steps[2].phases[sc.PHASE_UPDATE_ACTOR] = 2.0  # step 3: twice the tokens, twice the time
    v = slow_steps.rank(steps, 1).verdicts[0]
    assert v.step.global_step == 3 and "per-token time 1.0\u00d7 (more tokens, not slower)" in slow_steps.cause_text(v)
