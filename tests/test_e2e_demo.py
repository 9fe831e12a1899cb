"""The real thing: `verl-otel demo` runs verl's real trainer (python -m verl.trainer.main_ppo: TaskRunner
actor, agent-loop workers, reward loop, checkpoint/weight sync, FSDP2 actor/ref workers) on the CPU,
activated by the environment alone, while a real Prometheus scrapes every process through the run's
file_sd file. Runs are shared by the tests of this module (see conftest fixtures)."""

from __future__ import annotations

from collections import Counter

import pytest

from helpers.prom import evaluate_every_expression
from helpers.traces import event_names, load_spans, parent_chain, step_tokens, steps

from verl_otel import semconv as sc

pytestmark = pytest.mark.verl

SYNC_PHASES = {"rollout", "old_log_prob", "ref", "adv", "update_actor", "update_weights"}


def _phase_names(tree):
    return Counter(s.name for s in tree.spans if s.name not in sc.NON_PHASE_SPANS)


@pytest.mark.parametrize("run_name", ["v1_run", "legacy_run"])
def test_one_trace_per_step_with_phase_children(request, run_name):
    run = request.getfixturevalue(run_name)
    assert run.rc == 0, run.log_tail()
    spans = load_spans(run.out / "traces.jsonl")
    by_step = steps(spans)
    assert sorted(by_step) == list(range(run.steps + 1)), sorted(by_step)
    assert _phase_names(by_step[0]) == Counter({"validate": 1}), "validation before training is its own trace"
    # the legacy run is GAE: reward, critic values and update as well
    expected = SYNC_PHASES | ({"reward", "values", "update_critic"} if run.trainer == "legacy" else set())
    for number in range(1, run.steps + 1):
        tree = by_step[number]
        names = _phase_names(tree)
        want = set(expected)
        if number % 2 == 0 or number == run.steps:
            want.add("validate")
        if number == run.steps:
            want.add("save_checkpoint")
        assert set(names) == want, (number, names)
        root = tree.root
        attrs = root.attributes
        assert attrs["verl.trainer"] == run.trainer and attrs["verl.project"] == "verl-otel-demo"
        assert attrs["verl.rollout_n"] == 2 and attrs["verl.batch_size"] == 4
        for key in ("verl.score_mean", "verl.response_length_mean", "verl.step_time_s", "verl.throughput"):
            assert key in attrs, (number, key)
        assert not root.status_error
        for s in tree.spans:  # every span of the step hangs off its root
            assert parent_chain(s, tree.spans)[-1] == "step", parent_chain(s, tree.spans)
    roles = {s.resource["verl.process.role"] for s in spans}
    assert {"trainer", "agent_loop_worker"} <= roles


def test_rollout_spans_cross_ray_into_the_step_trace(v1_run):
    spans = load_spans(v1_run.out / "traces.jsonl")
    by_step = steps(spans)
    for number in range(1, v1_run.steps + 1):
        workers = [
            s
            for s in by_step[number].spans
            if s.name == "rollout.worker" and s.attributes["verl.rollout.mode"] == "train"
        ]
        assert {w.attributes["verl.rollout.worker"] for w in workers} == {0, 1}
        assert sum(w.attributes["verl.rollout.samples"] for w in workers) == 4 * 2  # batch 4 x n 2
        assert all(w.resource["verl.process.role"] == "agent_loop_worker" for w in workers)
    samples = [s for s in spans if s.name == "rollout.sample"]
    assert samples and all(parent_chain(s, spans)[-1] == "step" for s in samples)


@pytest.mark.parametrize("run_name", ["v1_run", "legacy_run"])
def test_sample_spans_carry_tokens_score_and_timings(request, run_name):
    """v1 puts its samples into TransferQueue (its agent loop returns nothing): the counts still come
    from verl's AgentLoopOutput, as in the legacy loop."""
    run = request.getfixturevalue(run_name)
    samples = [s for s in load_spans(run.out / "traces.jsonl") if s.name == "rollout.sample"]
    assert samples
    for s in samples:
        attrs = s.attributes
        assert 0 < attrs["verl.sample.prompt_tokens"] <= 32 and 0 < attrs["verl.sample.response_tokens"] <= 16, attrs
        assert "verl.sample.reward_score" in attrs and attrs["verl.sample.generate_s"] >= 0, attrs
        assert attrs["verl.sample.turns"] >= 1 and attrs["verl.sample.index"] >= 0, attrs
    assert {s.attributes["verl.sample.rollout_n"] for s in samples} == {0, 1}, "n=2: both sessions are seen"


@pytest.mark.parametrize("run_name", ["v1_run", "legacy_run"])
def test_reward_loop_calls_join_the_step_trace(request, run_name):
    """Each sample's reward call (agent-loop worker -> reward-loop worker, its own process) is
    counted on a reward.worker span beside the rollout.worker spans (under the trainer's rollout
    span; in v1 under the step, whose generation is dispatched before verl's gen timer opens);
    the slowest calls are spans."""
    run = request.getfixturevalue(run_name)
    by_step = steps(load_spans(run.out / "traces.jsonl"))
    # every step, the last one too: the reward workers cannot see a step end and Ray ends them without
    # atexit; the trainer asks them to emit at each step's end (the legacy run's last step is a fast one,
    # so no idle wait could have done it)
    assert run.trainer != "legacy" or run.slow_step("update_actor") != run.steps
    for number in range(1, run.steps + 1):
        spans = by_step[number].spans
        by_id = {s.span_id: s for s in spans}
        rollout_parents = {
            s.parent_id for s in spans if s.name == "rollout.worker" and s.attributes["verl.rollout.mode"] == "train"
        }
        assert len(rollout_parents) == 1
        groups = [s for s in spans if s.name == "reward.worker" and s.parent_id in rollout_parents]
        assert groups and all(g.resource["verl.process.role"] == "reward_worker" for g in groups)
        assert sum(g.attributes["verl.reward.calls"] for g in groups) == 4 * 2, (number, groups)
        calls = [s for s in spans if s.name == "reward.compute_score" and by_id[s.parent_id] in groups]
        assert len(calls) == sum(g.attributes["verl.reward.calls_spanned"] for g in groups) > 0
        assert all(c.attributes["verl.reward.data_source"] == "openai/gsm8k" for c in calls)


#: worker-group call -> the trainer phase it runs under
WORKER_PARENT = {
    "worker.compute_log_prob": "old_log_prob",
    "worker.compute_ref_log_prob": "ref",
    "worker.update_actor": "update_actor",
    "worker.infer_batch": "values",
    "worker.train_mini_batch": "update_critic",
}


@pytest.mark.parametrize("run_name", ["v1_run", "legacy_run"])
def test_training_worker_calls_join_the_step_trace(request, run_name):
    """The trainer's context travels in the batch (KVBatchMeta in v1, TensorDict in legacy) into the
    FSDP worker processes: each call is a span under its phase, from the worker's own process."""
    run = request.getfixturevalue(run_name)
    by_step = steps(load_spans(run.out / "traces.jsonl"))
    want = {"worker.compute_log_prob", "worker.compute_ref_log_prob", "worker.update_actor"}
    if run.trainer == "legacy":
        want |= {"worker.infer_batch", "worker.train_mini_batch"}
    for number in range(1, run.steps + 1):
        spans = by_step[number].spans
        by_id = {s.span_id: s for s in spans}
        calls = [s for s in spans if s.name.startswith("worker.")]
        assert {s.name for s in calls} == want, (number, [s.name for s in calls])
        for s in calls:
            assert s.resource["verl.process.role"] == "train_worker"
            assert by_id[s.parent_id].name == WORKER_PARENT[s.name]
            assert s.attributes["verl.worker.batch_size"] == 8 and s.attributes["verl.worker.rank"] == 0
    # the slow step's update_actor was slowed inside the worker: the worker's span shows it
    slow = [s for s in by_step[run.slow_step("update_actor")].spans if s.name == "worker.update_actor"]
    assert (slow[0].end_ns - slow[0].start_ns) / 1e9 >= 3.0


def test_slow_phase_shows_in_its_step(v1_run):
    by_step = steps(load_spans(v1_run.out / "traces.jsonl"))
    actor = {n: next(s for s in t.spans if s.name == "update_actor") for n, t in by_step.items() if n > 0}
    dur = {n: (s.end_ns - s.start_ns) / 1e9 for n, s in actor.items()}
    assert dur[3] >= 3.0 and dur[3] > 2 * max(dur[1], dur[2]), dur
    assert by_step[3].root.attributes["verl.slowest_phase"] in ("update_actor", "rollout")


def test_v1_steps_and_phases_carry_the_sampled_batchs_tokens(v1_run):
    """v1 keeps its batch in TransferQueue: the tokens come from the tags of what its replay buffer sampled, and
    equal the sums over the step's sample spans (batch 4 x n 2, every sample spanned)."""
    by_step = steps(load_spans(v1_run.out / "traces.jsonl"))
    for number in range(1, v1_run.steps + 1):
        prompt, response = step_tokens(by_step[number])
        spans = by_step[number].spans
        train = {s.span_id for s in spans if s.name == sc.SPAN_ROLLOUT_WORKER and s.attributes[sc.ATTR_MODE] == "train"}
        samples = [s.attributes for s in spans if s.name == sc.SPAN_ROLLOUT_SAMPLE and s.parent_id in train]
        assert len(samples) == 4 * 2, (number, samples)
        assert prompt == sum(a[sc.ATTR_SAMPLE_PROMPT_TOKENS] for a in samples), number
        assert response == sum(a[sc.ATTR_SAMPLE_RESPONSE_TOKENS] for a in samples), number
    per_1k = v1_run.prom.scalar_by(sc.PHASE_S_PER_1K_TOKENS.name, "phase")
    assert {sc.PHASE_ROLLOUT, sc.PHASE_OLD_LOG_PROB, sc.PHASE_REF, sc.PHASE_UPDATE_ACTOR} <= set(per_1k), per_1k
    assert all(v > 0 for v in per_1k.values()), per_1k


def test_prometheus_sees_progress_of_every_process(v1_run):
    prom, at = v1_run.prom, v1_run.query_time
    assert at is not None, "the run never settled at its last step in Prometheus"
    targets = v1_run.extra["targets"]  # while the run was up (each process leaves file_sd at exit)
    roles = {t["labels"].get("verl_process_role") for t in targets}
    projects = {t["labels"].get("verl_project") for t in targets if t["labels"]["verl_process_role"] != "train_worker"}
    assert projects == {"verl-otel-demo"}, projects
    assert {"trainer", "agent_loop_worker", "train_worker"} <= roles, roles
    done = prom.query("verl_rollout_samples_completed", at)
    expected = {
        (r["metric"][sc.LABEL_ROLLOUT_WORKER], r["metric"]["mode"]): float(r["value"][1])
        for r in prom.query("verl_rollout_samples_expected", at)
    }
    assert {(r["metric"][sc.LABEL_ROLLOUT_WORKER], r["metric"]["mode"]) for r in done} == {
        ("0", "train"),
        ("1", "train"),
        ("0", "validate"),
        ("1", "validate"),
    }
    for r in done:
        key = (r["metric"][sc.LABEL_ROLLOUT_WORKER], r["metric"]["mode"])
        assert float(r["value"][1]) == expected[key] > 0, key
    assert prom.scalar_by("sum(verl_rollout_samples_inflight)") == {(): 0.0}
    assert prom.scalar_by("max(verl_training_step)") == {(): 3.0}
    assert prom.scalar_by("max(verl_training_steps_planned)") == {(): 3.0}
    keys = {r["metric"]["key"] for r in prom.query("verl_training_metric", at)}
    assert {
        "critic/score/mean",
        "response_length/mean",
        "timing_s/step",
        "actor/pg_loss",
        "val-core/openai/gsm8k/acc/mean@1",
    } <= keys, sorted(keys)[:20]
    # actor update progress comes from verl's real TrainingWorker (2 mini-batches per update)
    upd = prom.scalar_by("verl_update_minibatches_completed", "role")
    assert upd == {"actor": 2.0} and prom.scalar_by("verl_update_minibatches_expected", "role") == {"actor": 2.0}
    hist = prom.scalar_by("sum(verl_step_duration_seconds_count)")
    assert hist == {(): 3.0}
    assert prom.scalar_by('sum(verl_phase_active{phase="update_actor"})') == {(): 0.0}


def test_series_count_does_not_grow_with_steps(v1_run):
    # what was exported while step 2 ran against what was exported from step 3's start to the run's end, per metric
    # and label names: a step (or any per-step value) kept in a label would give step 3 more series of that kind
    # than step 2. A kind that first shows in step 3 is no growth (the checkpoint the demo saves at its last step,
    # a counter a slow machine first increments then); one that step 3 no longer shows is none either. The series
    # naming the checkpoint phase (its histogram, verl's timing_s/save_checkpoint) are new values in step 3 alone.
    t = v1_run.extra["step_times"]
    assert {2, 3} <= set(t) and t[2] < t[3] < v1_run.query_time, t
    step2, step3 = v1_run.series(t[2], t[3]), v1_run.series(t[3], v1_run.query_time)
    step3 = {s for s in step3 if not any(v.endswith("save_checkpoint") for _, v in s)}
    assert len(step2) >= 20, sorted(step2)

    def kinds(series: set) -> Counter:
        return Counter((dict(s).get("__name__"), frozenset(k for k, _ in s)) for s in series)

    before, after = kinds(step2), kinds(step3)
    grown = {kind: (before[kind], n) for kind, n in after.items() if kind in before and n > before[kind]}
    assert not grown, sorted(
        sorted(dict(s).items()) for s in step3 - step2 if (dict(s).get("__name__"), frozenset(k for k, _ in s)) in grown
    )[:20]


def test_every_dashboard_and_alert_expression_runs_on_the_real_run(v1_run):
    assert v1_run.query_time is not None
    empty_without_reason, with_data = evaluate_every_expression(v1_run.prom)
    assert not empty_without_reason, empty_without_reason
    assert with_data >= 20, with_data


def test_slow_steps_cli_names_step_and_phase(v1_run, capsys):
    import json

    from verl_otel.cli.main import main

    assert main(["slow-steps", "--file", str(v1_run.out / "traces.jsonl"), "--json", "--top", "3"]) == 0
    top = json.loads(capsys.readouterr().out)[0]
    assert top["global_step"] == 3 and top["cause"]["phase"] == "update_actor", top
    # the slow sample injected into the stand-in server is the slowest rollout.sample of step 3
    assert top["slowest_samples"][0]["duration_s"] >= 2.0
    spans = load_spans(v1_run.out / "traces.jsonl")
    slow = max((s for s in spans if s.name == "rollout.sample"), key=lambda s: s.end_ns - s.start_ns)
    assert slow.attributes["verl.global_step"] == 3 and slow.trace_id == top["trace_id"]
    assert parent_chain(slow, spans) == ["rollout.sample", "rollout.worker", "step"] or parent_chain(slow, spans) == [
        "rollout.sample",
        "rollout.worker",
        "rollout",
        "step",
    ]


def test_v1_colocate_async_steps_are_traces(colocate_async_run):
    run = colocate_async_run
    assert run.rc == 0, run.log_tail()
    by_step = steps(load_spans(run.out / "traces.jsonl"))
    assert sorted(by_step) == [0, 1, 2]
    for number in (1, 2):
        root = by_step[number].root
        assert root.attributes["verl.trainer"] == "v1"
        assert root.attributes["verl.trainer_mode"] == "colocate_async"
        assert set(_phase_names(by_step[number])) >= SYNC_PHASES, _phase_names(by_step[number])
    # validation generations (the demo sets trainer.log_val_generations=2): counted, no text by default
    validate = next(s for s in by_step[2].spans if s.name == "validate")
    assert validate.attributes["verl.val_generations.count"] == 2
    assert event_names(validate).count("verl.val_generation") == 2


def test_compare_names_the_trainer_and_phases_of_the_legacy_and_v1_runs(v1_run, legacy_run):
    """`verl-otel compare` over two real runs' trace directories, as a user runs it: the trainers differ
    (legacy vs v1), the verl version each run's step spans carry is the same and is not listed, every
    phase of both runs has its medians, and step 0 (validation only) is listed apart."""
    import importlib.metadata
    import json
    import subprocess
    import sys

    assert v1_run.rc == 0 and legacy_run.rc == 0
    cmd = [sys.executable, "-m", "verl_otel.cli.main", "compare", str(legacy_run.out), str(v1_run.out)]
    doc = json.loads(subprocess.run([*cmd, "--json"], capture_output=True, text=True, check=True, timeout=120).stdout)
    diffs = {d["attribute"]: (d["baseline"], d["other"]) for d in doc["differences"]}
    assert diffs[sc.ATTR_TRAINER] == (sc.TRAINER_LEGACY, sc.TRAINER_V1), diffs
    version = importlib.metadata.version("verl")
    assert doc["baseline"]["config"][sc.ATTR_VERL_VERSION] == doc["other"]["config"][sc.ATTR_VERL_VERSION] == version
    assert sc.ATTR_VERL_VERSION not in diffs
    assert doc["baseline"]["steps"] == legacy_run.steps and doc["other"]["steps"] == v1_run.steps
    assert 0 in doc["baseline"]["steps_apart"] and 0 in doc["other"]["steps_apart"]
    assert doc["other"]["samples"] == 4 * 2 * v1_run.steps  # batch 4 x n 2 a step
    phases = {p["phase"]: p for p in doc["phases"]}
    assert {sc.PHASE_ROLLOUT, sc.PHASE_UPDATE_ACTOR} <= set(phases)
    assert all(p["baseline_s"] > 0 and p["other_s"] > 0 for p in phases.values())
    assert phases[sc.PHASE_UPDATE_ACTOR]["other_s_per_1k_tokens"] is not None  # v1 phases carry tokens
    text = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout
    assert f"{sc.ATTR_TRAINER}: {sc.TRAINER_LEGACY} -> {sc.TRAINER_V1}" in text, text
