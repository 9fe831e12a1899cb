"""The demo's `--slow` knobs and `--hang rollout` with real vLLM (verl_otel/demo/vllm_slow.py, vllm_long_tail.py),
piece by piece: which request becomes the long tail or hangs the engine and what it asks vLLM for, the rollout
delay, the engine argument, and the logits processor itself in vLLM's venv. The whole path, in a real run, is
tests/test_e2e_vllm.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from types import SimpleNamespace
from typing import Any

import pytest

from helpers.procs import ROOT, clean_env
from helpers.verl_runs import vllm_python

from verl_otel.demo import vllm_slow
from verl_otel.demo.slow import ENV, HANG_ENV, SlowSpec

MAX_MODEL_LEN = 4096
PROMPT = {"prompt_token_ids": [1, 2, 3, 4, 5]}


class FakeEngine:
    """Stands for vLLM's AsyncLLM: what verl-otel's demo reads of it, and generate's outputs."""

    model_config = SimpleNamespace(max_model_len=MAX_MODEL_LEN)

    @staticmethod
    async def generate(prompt: Any, sampling_params: Any, request_id: str, **_kw: Any):
        yield ("out", request_id, time.monotonic())


def params(temperature: float = 1.0) -> SimpleNamespace:
    return SimpleNamespace(temperature=temperature, max_tokens=16, extra_args=None)


@pytest.fixture
def process(monkeypatch):
    def make(spec: str, global_steps: int | None) -> vllm_slow._Process:
        monkeypatch.setenv(ENV, spec)
        proc = vllm_slow._Process()
        proc.server = SimpleNamespace(global_steps=global_steps)
        monkeypatch.setattr(vllm_slow, "_process", proc)
        return proc

    return make


def call(p: SimpleNamespace, request_id: str = "r") -> list[Any]:
    engine = FakeEngine()

    async def consume() -> list[Any]:
        gen = vllm_slow.engine_generate(
            engine.generate, engine, (), {"prompt": PROMPT, "sampling_params": p, "request_id": request_id}
        )
        return [o async for o in gen]

    return asyncio.run(consume())


def test_one_training_request_of_the_step_becomes_the_long_tail(process):
    process("rollout_sample@2=3", global_steps=1)  # weights of step 1 generate step 2
    before = time.time()
    first, second, greedy = params(), params(), params(temperature=0)
    for p in (greedy, first, second):
        call(p)
    assert first.max_tokens == MAX_MODEL_LEN - len(PROMPT["prompt_token_ids"])  # the whole context
    deadline = first.extra_args[vllm_slow.DEADLINE_KEY]
    assert before + 3 <= deadline <= time.time() + 3
    assert (second.max_tokens, second.extra_args) == (16, None), "one sample per step"
    assert (greedy.max_tokens, greedy.extra_args) == (16, None), "validation is not slowed"


def test_other_steps_and_the_carried_context_are_left_alone(process):
    process("rollout_sample@2=3", global_steps=0)  # step 1
    p = params()
    call(p)
    assert (p.max_tokens, p.extra_args) == (16, None)
    process("rollout_sample@1=3", global_steps=None)  # before verl's first set_global_steps: step 1
    p = params()
    p.extra_args = {"traceparent-key": "kept"}
    call(p)
    assert p.extra_args["traceparent-key"] == "kept" and vllm_slow.DEADLINE_KEY in p.extra_args


def test_a_hang_rides_on_the_steps_first_training_request(process, monkeypatch):
    """`--hang rollout@K`: the engine is to stop in step K's first training request: at once, or midway through
    the time the long tail has beside the hang when it is also the tail (the other requests are done by then)."""
    monkeypatch.setenv(HANG_ENV, "rollout@2=5")
    process("", global_steps=1)
    greedy, first, second = params(temperature=0), params(), params()
    before = time.time()
    for p in (greedy, first, second):
        call(p)
    start, seconds = first.extra_args[vllm_slow.HANG_KEY]
    assert before <= start <= time.time() and seconds == 5.0 and first.max_tokens == 16
    assert second.extra_args is None and greedy.extra_args is None, "once a step, training only"
    process("rollout_sample@2=9", global_steps=1)
    tail = params()
    call(tail)
    start, seconds = tail.extra_args[vllm_slow.HANG_KEY]
    deadline = tail.extra_args[vllm_slow.DEADLINE_KEY]
    assert start == pytest.approx(deadline - 9 + 2, abs=0.05) and seconds == 5.0  # (9 - 5) / 2 into the tail
    process("", global_steps=0)  # step 1: no hang asked for
    other = params()
    call(other)
    assert other.extra_args is None


def test_rollout_delay_waits_before_the_engine(process):
    process("rollout@3=0.3", global_steps=2)
    t0 = time.monotonic()
    [(_, _, engine_saw_it)] = call(params())
    assert engine_saw_it - t0 >= 0.3
    t0 = time.monotonic()
    call(params(temperature=0))
    assert time.monotonic() - t0 < 0.3, "validation requests are not delayed"


def test_the_engine_argument_only_when_a_long_tail_is_asked_for():
    assert vllm_slow.overrides(SlowSpec.parse(["update_actor@3=3", "rollout@2=1"])) == []
    [override] = vllm_slow.overrides(SlowSpec.parse(["rollout_sample@1=4"]))
    assert override.endswith(f"logits_processors='{vllm_slow.LOGITS_PROCESSOR}'")
    assert vllm_slow.overrides(SlowSpec(), SlowSpec.parse_hang(["rollout@1=5"])) == [override], "the engine hang"
    assert vllm_slow.overrides(SlowSpec(), SlowSpec.parse_hang(["reward@1=5"])) == []


_PROCESSOR_CHECK = r"""
import json, sys, time, torch
from types import SimpleNamespace
from vllm import SamplingParams
from verl_otel.demo.vllm_long_tail import LongTail
from verl_otel.demo.vllm_slow import DEADLINE_KEY, HANG_KEY, LOGITS_PROCESSOR
from vllm.v1.sample.logits_processor import _load_logitsprocs_by_fqcns

eos = 3
config = SimpleNamespace(model_config=SimpleNamespace(hf_config=SimpleNamespace(eos_token_id=eos)))
proc = LongTail(config, torch.device("cpu"), False)
out = {"loaded": _load_logitsprocs_by_fqcns([LOGITS_PROCESSOR]) == [LongTail]}
out["plain"] = proc.new_req_logits_processor(SamplingParams(max_tokens=8)) is None
for name, deadline in (("before", time.time() + 60), ("after", time.time() - 1)):
    fn = proc.new_req_logits_processor(SamplingParams(max_tokens=8, extra_args={DEADLINE_KEY: deadline}))
    row = fn([], torch.zeros(10))
    out[name] = [None if x == float("-inf") else float(x) for x in row.tolist()]
fn = proc.new_req_logits_processor(SamplingParams(max_tokens=8, extra_args={HANG_KEY: [time.time() + 0.3, 0.5]}))
out["hang"] = []
for pause in (0.0, 0.35, 0.0):  # blocks once, at its first call from its start on, and leaves the logits alone
    time.sleep(pause)
    t0 = time.monotonic()
    row = fn([7], torch.ones(4))
    out["hang"].append([round(time.monotonic() - t0, 2), row.tolist()])
print(json.dumps(out))
"""


def test_the_logits_processor_holds_eos_back_then_forces_it():
    vllm_py = vllm_python()
    done = subprocess.run(
        [str(vllm_py), "-c", _PROCESSOR_CHECK],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(VLLM_TARGET_DEVICE="cpu"),
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["loaded"] and out["plain"], out  # vLLM loads it by the name the demo passes; others untouched
    assert out["before"][3] is None and all(x == 0.0 for i, x in enumerate(out["before"]) if i != 3), out
    assert out["after"][3] == 0.0 and all(x is None for i, x in enumerate(out["after"]) if i != 3), out
    waits = [w for w, _ in out["hang"]]
    assert waits[0] < 0.25 and 0.5 <= waits[1] < 2 and waits[2] < 0.25, out["hang"]
    assert all(row == [1.0] * 4 for _, row in out["hang"]), out["hang"]
