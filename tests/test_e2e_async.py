"""verl's separate_async trainer on the CPU demo (`verl-otel demo --trainer separate_async`): real FSDP2
actor/ref workers (verl's DetachActorWorker), a hybrid stand-in LLM server beside a standalone one whose
rollout worker is verl's real CheckpointEngineWorker, weights carried to it by the demo's gloo checkpoint
engine. One global step runs rollout..update_actor once per parameter-sync mini-batch, so a phase occurs
several times in one step trace. The run is shared by this module's tests (conftest fixture)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from helpers.traces import event_names, load_spans, parent_chain, steps

from verl_otel import semconv as sc

pytestmark = pytest.mark.verl

PER_SYNC = ("rollout", "old_log_prob", "ref", "adv", "update_actor")
SYNCS = 2  # the demo's trainer.v1.separate_async.parameter_sync_step
BATCH = 4 * 2  # data.train_batch_size x rollout.n
VALIDATED = (2, 3)  # test_freq 2 and the last of 3 steps (step 0 validates before training)
PHASE_SPANS = {*PER_SYNC, "update_weights", "switch_to_trainer", "validate", "save_checkpoint"}


def _phases(tree):
    return Counter(s.name for s in tree.spans if s.name in PHASE_SPANS)


def _spans(run):
    assert run.rc == 0, run.log_tail()
    return load_spans(run.out / "traces.jsonl")


def test_each_step_is_one_trace_with_a_phase_run_per_mini_batch(separate_async_run):
    run = separate_async_run
    by_step = steps(_spans(run))
    assert sorted(by_step) == list(range(run.steps + 1)), sorted(by_step)
    assert _phases(by_step[0]) == Counter({"validate": 1})
    for number in range(1, run.steps + 1):
        tree = by_step[number]
        want = Counter(dict.fromkeys(PER_SYNC, SYNCS))
        want["update_weights"] = 1
        # the hybrid replica serves rollout after init and after each validation, and is taken
        # back for training at the next step begin
        if number == 1 or number - 1 in VALIDATED:
            want["switch_to_trainer"] = 1
        if number in VALIDATED:
            want["validate"] = 1
        if number == run.steps:
            want["save_checkpoint"] = 1
        assert _phases(tree) == want, (number, _phases(tree))
        root = tree.root
        assert root.attributes["verl.trainer"] == "v1"
        assert root.attributes["verl.trainer_mode"] == "separate_async"
        assert not root.status_error
        for s in tree.spans:
            assert parent_chain(s, tree.spans)[-1] == "step", parent_chain(s, tree.spans)
        # separate runs, one per mini-batch, in verl's order (not one span stretched over both)
        runs = sorted((s for s in tree.spans if s.name in PER_SYNC), key=lambda s: s.start_ns)
        assert [s.name for s in runs] == list(PER_SYNC) * SYNCS
        sync = next(s for s in tree.spans if s.name == "update_weights")
        assert sync.start_ns >= runs[-1].end_ns


def test_rollout_spans_cross_ray_into_the_step_traces(separate_async_run):
    run = separate_async_run
    spans = _spans(run)
    by_step = steps(spans)
    total = 0
    for number in range(1, run.steps + 1):
        workers = [
            s
            for s in by_step[number].spans
            if s.name == "rollout.worker" and s.attributes["verl.rollout.mode"] == "train"
        ]
        assert {w.attributes["verl.rollout.worker"] for w in workers} == {0, 1}, number
        assert all(w.resource["verl.process.role"] == "agent_loop_worker" for w in workers)
        # its index within its process role, under the new key and the deprecated one (CHANGELOG.md)
        assert all(
            w.resource[sc.RES_ROLLOUT_WORKER_INDEX]
            == w.resource[sc.RES_DEPRECATED_WORKER_INDEX]
            == w.attributes["verl.rollout.worker"]
            for w in workers
        )
        assert all(parent_chain(w, by_step[number].spans)[-1] == "step" for w in workers)
        samples = sum(w.attributes["verl.rollout.samples"] for w in workers)
        assert samples >= BATCH, (number, samples)
        total += samples
    # each batch is spanned once: one submitted per step (prepare_step) plus verl's warm-up batch
    # (num_warmup_batches=1); the batch the last step submits may still be running when fit() ends
    assert BATCH * run.steps <= total <= BATCH * (run.steps + 1), total
    samples = [s for s in spans if s.name == "rollout.sample"]
    assert samples
    for s in samples:
        chain = parent_chain(s, spans)
        assert chain[:2] == ["rollout.sample", "rollout.worker"] and chain[-1] == "step", chain


def test_validation_generations_are_events_of_each_validate_span(separate_async_run):
    by_step = steps(_spans(separate_async_run))
    for number in (0, *VALIDATED):
        validate = [s for s in by_step[number].spans if s.name == "validate"]
        assert len(validate) == 1, number
        # the demo sets trainer.log_val_generations=2: counted, no text by default
        assert validate[0].attributes["verl.val_generations.count"] == 2
        assert event_names(validate[0]).count("verl.val_generation") == 2
        workers = [
            s
            for s in by_step[number].spans
            if s.name == "rollout.worker" and s.attributes["verl.rollout.mode"] == "validate"
        ]
        assert workers and all(parent_chain(w, by_step[number].spans)[1] == "validate" for w in workers)


def test_the_gloo_weight_sync_parts_sit_under_update_weights(separate_async_run):
    """Both sides of each step's sync to the standalone replica (the demo's gloo checkpoint engine, a verl plugin):
    the actor's weights.sync and the replica's weights.receive under the trainer's update_weights, every byte
    counted, their parts under them (step 2's slowed sync has its stalls beside them: test_e2e_stall_matrix)."""
    run = separate_async_run
    spans = _spans(run)
    model = _model_bytes(run.out / "assets" / "tiny_model")
    for number in range(1, run.steps + 1):
        tree = steps(spans)[number]
        (phase,) = [s for s in tree.spans if s.name == sc.PHASE_UPDATE_WEIGHTS]
        (sync,) = [
            s for s in tree.spans if s.name == sc.SPAN_WEIGHT_SYNC and s.attributes[sc.ATTR_WSYNC_MODE] != "naive"
        ]
        assert sync.parent_id == phase.span_id and sync.attributes[sc.ATTR_WSYNC_MODE] == "cpu_gloo"
        assert sync.attributes[sc.ATTR_WSYNC_BYTES] == model and sync.attributes[sc.ATTR_GLOBAL_STEP] == number
        parts = Counter(s.name for s in tree.spans if s.parent_id == sync.span_id and s.name != sc.SPAN_STALL)
        assert parts == Counter({sc.SPAN_WEIGHT_GATHER: 1, sc.SPAN_WEIGHT_TRANSFER: 1, sc.SPAN_WEIGHT_BUCKET: 1})
        # the replica's side: its CheckpointEngineWorker (another process) received every byte under the same phase
        (recv,) = [s for s in tree.spans if s.name == sc.SPAN_WEIGHT_RECEIVE]
        assert recv.parent_id == phase.span_id and recv.attributes[sc.ATTR_GLOBAL_STEP] == number
        assert recv.attributes[sc.ATTR_WSYNC_MODE] == "cpu_gloo" and recv.attributes[sc.ATTR_WSYNC_BYTES] == model
        assert recv.attributes[sc.ATTR_WSYNC_TENSORS] == sync.attributes[sc.ATTR_WSYNC_TENSORS]
        assert recv.resource["verl.process.role"] == sc.PROCESS_ROLE_REPLICA_WORKER, recv.resource  # not the server
        assert recv.resource["process.pid"] != sync.resource["process.pid"]
        assert recv.start_ns >= phase.start_ns and recv.end_ns <= phase.end_ns
        assert recv.attributes[sc.ATTR_WSYNC_RECEIVE_S] > 0 and recv.attributes[sc.ATTR_WSYNC_LOAD_S] > 0
        parts = Counter(s.name for s in tree.spans if s.parent_id == recv.span_id and s.name != sc.SPAN_STALL)
        assert parts == Counter({sc.SPAN_WEIGHT_RECEIVE_PULL: 1, sc.SPAN_WEIGHT_LOAD: 1, sc.SPAN_WEIGHT_BUCKET: 1})
    # no receive outside a step's phase (the sync before the first step has no trace: stall watch only)
    assert sum(s.name == sc.SPAN_WEIGHT_RECEIVE for s in spans) == run.steps


def _model_bytes(model_dir: Path) -> int:
    from safetensors.torch import load_file

    tensors: dict = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        tensors.update(load_file(f))
    return sum(t.numel() * 4 for t in tensors.values())  # the demo trains in fp32


def test_prometheus_counts_every_phase_run_and_the_weight_sync_payload(separate_async_run):
    run = separate_async_run
    prom, at = run.prom, run.query_time
    assert at is not None, "the run never settled at its last step in Prometheus"
    spans = _spans(run)
    in_traces = Counter(s.name for s in spans if s.name in PHASE_SPANS)
    assert in_traces["rollout"] == SYNCS * run.steps
    counted = {
        k: round(v) for k, v in prom.scalar_by("sum by (phase) (verl_phase_duration_seconds_count)", "phase").items()
    }
    assert {p: counted.get(p, 0) for p in in_traces} == dict(in_traces), counted
    assert prom.scalar_by("sum(verl_step_duration_seconds_count)") == {(): float(run.steps)}
    assert prom.scalar_by("max(verl_training_step)") == {(): float(run.steps)}
    assert prom.scalar_by("sum(verl_phase_active)") == {(): 0.0}
    # every actor weight crossed the gloo checkpoint engine to the standalone replica's worker
    payload = prom.scalar_by('max(verl_training_metric{key="checkpoint_engine/payload_mbytes"})')
    assert payload == {(): pytest.approx(_model_bytes(run.out / "assets" / "tiny_model") / (1 << 20))}, payload
    done = {
        (r["metric"][sc.LABEL_ROLLOUT_WORKER], r["metric"]["mode"])
        for r in prom.query("verl_rollout_samples_completed", at)
        if float(r["value"][1]) > 0
    }
    assert {("0", "train"), ("1", "train"), ("0", "validate"), ("1", "validate")} <= done, done


def test_each_mini_batchs_phases_carry_its_own_tokens(separate_async_run):
    """v1 trains a step's parameter_sync_step mini-batches in turn: the step span carries the tokens of both, each
    phase run those of its own mini-batch (rollout: its responses), and the per-1k gauge reads the step's sums."""
    run = separate_async_run
    by_step = steps(_spans(run))
    for number in range(1, run.steps + 1):
        tree = by_step[number]
        prompt = tree.root.attributes[sc.ATTR_STEP_PROMPT_TOKENS]
        response = tree.root.attributes[sc.ATTR_STEP_RESPONSE_TOKENS]
        runs = sorted((s for s in tree.spans if s.name in PER_SYNC), key=lambda s: s.start_ns)
        batches = [runs[i : i + len(PER_SYNC)] for i in range(0, len(runs), len(PER_SYNC))]
        assert len(batches) == SYNCS, [s.name for s in runs]
        generated = [next(s for s in b if s.name == sc.PHASE_ROLLOUT).attributes[sc.ATTR_PHASE_TOKENS] for b in batches]
        handled = [
            next(s for s in b if s.name == sc.PHASE_UPDATE_ACTOR).attributes[sc.ATTR_PHASE_TOKENS] for b in batches
        ]
        assert all(g > 0 for g in generated) and sum(generated) == response, (number, generated, response)
        assert all(h > g for h, g in zip(handled, generated, strict=True)) and sum(handled) == prompt + response
        for batch, tokens in zip(batches, handled, strict=True):
            for s in batch:
                if s.name in (sc.PHASE_OLD_LOG_PROB, sc.PHASE_REF):
                    assert s.attributes[sc.ATTR_PHASE_TOKENS] == tokens, (number, s.name, s.attributes)
                seconds = (
                    s.attributes.get(sc.ATTR_PHASE_S_PER_1K_TOKENS, 0.0)
                    * s.attributes.get(sc.ATTR_PHASE_TOKENS, 0)
                    / 1000
                )
                assert abs(seconds - s.seconds) <= 0.05 * s.seconds + 1e-3 or s.name == sc.PHASE_ADV, (
                    s.name,
                    s.attributes,
                )
    per_1k = run.prom.scalar_by(sc.PHASE_S_PER_1K_TOKENS.name, "phase")
    assert {sc.PHASE_ROLLOUT, sc.PHASE_OLD_LOG_PROB, sc.PHASE_UPDATE_ACTOR} <= set(per_1k) and min(per_1k.values()) > 0


def test_rl_insight_beside_it_gets_its_events_and_none_of_our_otel_settings(separate_async_run):
    """verl's RL-Insight on in the same run (trainer.logger=[console,rl_insight], the rl-insight package's hub actor,
    helpers/rl_insight.py): its hub served verl's scalars and exported its lanes, with its own OTel settings, while
    the OTEL_* values meant for verl-otel's Collector reached every process verl-otel instruments (issue 38 item 6).
    The module's other tests check that verl-otel's spans and metrics of this run are whole."""
    from helpers.rl_insight import OURS

    run = separate_async_run
    rli = run.extra["rl_insight"]
    spans = _spans(run)
    assert rli.hub_targets(), "the hub never registered its /metrics with RL-Insight's server"
    assert "rl_insight_monitor_" in rli.hub_metrics, rli.hub_metrics[-2000:]
    lanes = rli.rx.received.spans
    assert lanes, "RL-Insight's hub exported no span"
    assert all(s.resource.get("service.name") == "rl_insight_monitor" for s in lanes), lanes[0].resource
    header = OURS["OTEL_EXPORTER_OTLP_HEADERS"].split("=")[0]
    assert rli.rx.received.trace_headers and not [h for h in rli.rx.received.trace_headers if header in h]
    assert not [s.resource for s in lanes if "verl_otel.test" in s.resource]
    log = (run.out / "demo.log").read_text(errors="replace")
    assert "telemetry error in" not in log and "telemetry set-up for" not in log, "verl-otel failed beside RL-Insight"
    # ours: every process verl-otel instrumented applied them
    roles = {s.resource["verl.process.role"] for s in spans}
    assert {"trainer", "train_worker", "agent_loop_worker"} <= roles, roles
    assert all(s.resource.get("verl_otel.test") == "ours" for s in spans), {
        s.resource["verl.process.role"] for s in spans if s.resource.get("verl_otel.test") != "ours"
    }
