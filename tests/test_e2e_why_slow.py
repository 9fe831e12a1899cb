"""Why a step was slow, one level deeper (issue 28) on the real CPU demo (verl's legacy trainer, one FSDP rank):
token counts on the step and its phases, the time per 1k tokens gauge, and the long tail that
``--slow rollout_sample@3=3`` makes, named by ``verl-otel slow-steps``. One run shared by every test here."""

import json
import subprocess
import sys

import pytest

from helpers.traces import load_spans, steps
from helpers.verl_runs import start_demo

from verl_otel import semconv as sc

SLOW_STEP, TAIL_S = 3, 3.0


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    r = start_demo(tmp_path_factory.mktemp("demo-why"), "legacy", 4, [f"rollout_sample@{SLOW_STEP}={TAIL_S}"], True)
    assert r.rc == 0, r.log_tail()
    yield r
    r.prom.stop()


def _cli(run, *args: str) -> str:
    cmd = [sys.executable, "-m", "verl_otel.cli.main", "slow-steps", "--file", str(run.out / "traces.jsonl"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_steps_and_token_phases_carry_their_tokens(run):
    by_step = steps(load_spans(run.out / "traces.jsonl"))
    training = {n: t for n, t in by_step.items() if n >= 1}
    assert sorted(training) == [1, 2, 3, 4]
    for tree in training.values():
        prompt = tree.root.attributes[sc.ATTR_STEP_PROMPT_TOKENS]
        response = tree.root.attributes[sc.ATTR_STEP_RESPONSE_TOKENS]
        assert prompt > 0 and response > 0
        phases = {s.name: s for s in tree.spans if sc.ATTR_PHASE in s.attributes}
        for name in (sc.PHASE_ROLLOUT, sc.PHASE_OLD_LOG_PROB, sc.PHASE_REF, sc.PHASE_UPDATE_ACTOR):
            attrs = phases[name].attributes
            want = response if name == sc.PHASE_ROLLOUT else prompt + response
            assert attrs[sc.ATTR_PHASE_TOKENS] == want, name
            assert attrs[sc.ATTR_PHASE_S_PER_1K_TOKENS] == pytest.approx(phases[name].seconds * 1000 / want, rel=0.05)
        assert sc.ATTR_PHASE_TOKENS not in phases[sc.PHASE_ADV].attributes


def test_the_gauges(run):
    per_1k = run.prom.scalar_by(sc.PHASE_S_PER_1K_TOKENS.name, "phase")
    assert {sc.PHASE_ROLLOUT, sc.PHASE_OLD_LOG_PROB, sc.PHASE_REF, sc.PHASE_UPDATE_ACTOR} <= set(per_1k)
    assert all(v > 0 for v in per_1k.values())
    tail = run.prom.scalar_by(sc.ROLLOUT_TAIL_RATIO.name, "worker")
    assert tail and all(v >= 1.0 for v in tail.values())  # the last (normal) step's batches


def test_slow_steps_names_the_long_tail(run):
    first = json.loads(_cli(run, "--json", "--top", "1"))[0]
    assert first["global_step"] == SLOW_STEP and first["cause"]["phase"] == sc.PHASE_ROLLOUT
    tail = first["rollout_tail"]
    assert tail["long_tail"] and tail["sample_s"] >= TAIL_S and tail["tail_ratio"] >= 10
    assert tail["waited_share"] > 0.8  # the other samples took ~0.1 s of a 3 s rollout
    # the same tokens as usual: the rollout was slow per token, not given more of them
    assert first["cause"]["token_ratio"] == pytest.approx(1.0, abs=0.5) and first["cause"]["per_token_ratio"] > 5
    text = _cli(run, "--top", "1")
    assert f"long tail: sample #{tail['sample_index']} took" in text and "of the rollout waited for 1 sample" in text


def test_per_token_ranking_on_the_demo(run):
    ranked = json.loads(_cli(run, "--json", "--per-token"))
    assert ranked[0]["global_step"] == SLOW_STEP
    worst = [max(v["phase_per_token_ratios"].values()) for v in ranked]
    assert worst == sorted(worst, reverse=True)
    assert "slowest per token of 4 steps" in _cli(run, "--per-token")


def test_one_rank_names_no_straggler_and_sets_its_gauge(run):
    ranked = json.loads(_cli(run, "--json", "--top", "4"))
    assert [v["stragglers"] for v in ranked] == [[]] * 4  # the demo's one FSDP rank has nobody to straggle behind
    calls = run.prom.scalar_by(sc.WORKER_CALL_SECONDS.name, "method")
    assert {"update_actor", "compute_log_prob", "compute_ref_log_prob"} <= set(calls)
    assert set(run.prom.scalar_by(sc.WORKER_CALL_SECONDS.name, "rank")) == {"0"}


def test_every_process_role_exports_its_resident_memory(run):
    rss = run.prom.scalar_by(sc.PROCESS_RESIDENT_MEMORY.name, sc.LABEL_PROCESS_ROLE)
    assert {sc.ROLE_TRAINER, sc.ROLE_WORKER} <= set(rss), rss
    assert all(50e6 < v < 64e9 for v in rss.values()), rss  # Python + torch + Ray: tens of MB at least
