"""Stall evidence from the process doing the stalled work, on the shared real runs (conftest.py): each run slows
some calls for 3-4 s where a really slow call spends them (``--slow PHASE@STEP=S``, no planted hang): training-worker
calls inside verl's engine, a colocated weight sync in the actor worker's load of the weights, a validation in the
LLM server's engine, under thresholds those seconds pass (helpers/verl_runs.py::STALL_MATRIX). Per cell (trainer mode
x hooked call): the process that did the work wrote evidence naming its frame, pid and host; the trainer's stalled
phase says whom it waits on ("1 train_worker call compute_log_prob, rank 0", "2 agent_loop_worker calls
generate_sequences, ranks 0-1"), not only "unknown"; doctor makes them one incident rooted in that process. The cells
not here: docs/guides/hangs.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_otel import semconv as sc
from verl_otel.cli.main import main

pytestmark = pytest.mark.verl

TOP = 40  # frames of a capture's summary read
FRAME = "slowed_forward (cpu_plugin.py:"  # where the demo's slowed call spends its time, inside verl's engine
#: the colocated weight sync's: the stand-in rollout's load of the weights, in the actor worker (demo/standins.py)
FRAMES = {"update_weights": "slowed_load (standins.py:"}
#: the worker's own call for the trainer's worker-group method
CALLS = {**sc.WORKER_SPAN_NAMES, "update_weights": sc.CALL_WEIGHT_SEND}
#: (shared run, slowed phase, the worker method the trainer calls for it, the step slowed: --slow counts a process'
#: calls of the method; a weight sync, the step whose update it syncs)
CELLS = [
    ("v1_run", sc.PHASE_UPDATE_ACTOR, "update_actor", 3),
    ("legacy_run", sc.PHASE_UPDATE_WEIGHTS, "update_weights", 2),
    ("legacy_run", sc.PHASE_VALUES, "infer_batch", 3),
    ("legacy_run", sc.PHASE_UPDATE_CRITIC, "train_mini_batch", 3),
    ("legacy_run", sc.PHASE_UPDATE_ACTOR, "update_actor", 4),
    ("colocate_async_run", sc.PHASE_OLD_LOG_PROB, "compute_log_prob", 2),
    ("colocate_async_run", sc.PHASE_REF, "compute_ref_log_prob", 2),
    # separate_async runs each phase twice a step: its planted third call is step 2's second
    ("separate_async_run", sc.PHASE_OLD_LOG_PROB, "compute_log_prob", 2),
    ("separate_async_run", sc.PHASE_UPDATE_ACTOR, "update_actor", 2),
    ("fully_async_run", sc.PHASE_REF, "compute_ref_log_prob", 3),
    ("fully_async_run", sc.PHASE_UPDATE_ACTOR, "update_actor", 3),
]


def _doctor(out: Path, capsys) -> dict:
    capsys.readouterr()  # not what the run printed (its fixture set up inside this test, the module run alone)
    assert main(["doctor", "--dir", str(out), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _ids(cell: tuple) -> str:
    return f"{cell[0].removesuffix('_run')}-{cell[1]}@{cell[3]}"


@pytest.mark.parametrize("cell", CELLS, ids=_ids)
def test_the_slow_worker_and_the_waiting_trainer_say_it(request, capsys, cell):
    name, phase, method, step = cell
    run = request.getfixturevalue(name)
    assert run.rc == 0, run.log_tail()
    doc = _doctor(run.out, capsys)
    trainer = [
        r
        for r in doc["stalls"]
        if r["process_role"] == sc.PROCESS_ROLE_TRAINER and r["phase"] == phase and r["step"] == step
    ]
    assert trainer, [(r["process_role"], r["phase"], r["step"], r["call"]) for r in doc["stalls"]]
    t = trainer[0]
    assert f"train_worker call {method}, rank 0" in t["waits_for"] or f"calls {method}, ranks 0-" in t["waits_for"], t
    workers = [
        r
        for r in doc["stalls"]
        if r["process_role"] == sc.PROCESS_ROLE_WORKER
        and r["phase"] == phase
        and (r["step"] == step or (r["step"] is None and r["trace_id"] == t["trace_id"]))
    ]
    assert workers, [(r["process_role"], r["phase"], r["step"], r["call"]) for r in doc["stalls"]]
    for w in workers:
        assert w["frame"].startswith(FRAMES.get(method, FRAME)) and w["waiting_on"] == "", w
        assert w["call"] == CALLS[method] and w["pid"] and w["host"] and Path(w["evidence"]).is_file(), w
    # one incident: a slowed worker its root (each rank was slowed: any may be the root), the trainer waiting on it
    by_evidence = {w["evidence"]: w for w in workers}
    (inc,) = [i for i in doc["incidents"] if i["root"]["evidence"] in by_evidence]
    w = by_evidence[inc["root"]["evidence"]]
    assert (sc.PROCESS_ROLE_TRAINER, phase) in {(x["process_role"], x["phase"]) for x in inc["waiting"]}, inc
    assert main(["doctor", "--dir", str(run.out)]) == 0
    text = capsys.readouterr().out
    assert f"{sc.PROCESS_ROLE_WORKER} pid {w['pid']} on {w['host']} stuck in {w['call']} at {w['frame']}" in text
    assert f"waits on:  {t['waits_for']}" in text


VALIDATE_STEP = 5  # legacy_run's validate@5=3: the LLM server's engine 3 s slower on each validation request
DECODE = "slowed_decode (standins.py:"  # where the stand-in LLM server's engine spends them


def test_a_slow_validation_is_caught_in_the_llm_server_the_trainer_waits_on_the_agent_loop(legacy_run, capsys):
    """The validation's generation: the trainer's validate phase waits on the agent-loop workers (their samples
    wait on the LLM server's answers); the server, where the time went, is the incident's root."""
    assert legacy_run.rc == 0, legacy_run.log_tail()
    assert f"validate@{VALIDATE_STEP}=3" in legacy_run.slow
    doc = _doctor(legacy_run.out, capsys)
    brief = [(r["process_role"], r["phase"], r["step"], r["call"]) for r in doc["stalls"]]
    trainer = [
        r
        for r in doc["stalls"]
        if (r["process_role"], r["phase"], r["step"]) == (sc.PROCESS_ROLE_TRAINER, sc.PHASE_VALIDATE, VALIDATE_STEP)
    ]
    assert len(trainer) == 1, brief
    t = trainer[0]
    assert t["waits_for"] == "2 agent_loop_worker calls generate_sequences, ranks 0-1", t
    mine = [r for r in doc["stalls"] if r["trace_id"] == t["trace_id"] and r is not t]
    servers = [r for r in mine if r["process_role"] == sc.PROCESS_ROLE_ROLLOUT_SERVER]
    assert len(servers) == 1, brief
    server = servers[0]
    assert server["call"] == sc.CALL_SERVER_REQUEST and server["frame"].startswith(DECODE), server
    assert server["waiting_on"] == "" and server["pid"] and server["host"] and Path(server["evidence"]).is_file()
    samples = [r for r in mine if r["process_role"] == sc.PROCESS_ROLE_AGENT_LOOP]
    assert samples and all(r["call"] == sc.CALL_AGENT_SAMPLE and r["waiting_on"] for r in samples), samples
    (inc,) = [i for i in doc["incidents"] if i["root"]["evidence"] == server["evidence"]]
    waiting = {(x["process_role"], x["phase"]) for x in inc["waiting"]}
    assert {(sc.PROCESS_ROLE_TRAINER, sc.PHASE_VALIDATE), (sc.PROCESS_ROLE_AGENT_LOOP, sc.CALL_AGENT_SAMPLE)} <= waiting
    assert main(["doctor", "--dir", str(legacy_run.out)]) == 0
    text = capsys.readouterr().out
    where = f"{server['call']} at {server['frame']}"
    assert f"{sc.PROCESS_ROLE_ROLLOUT_SERVER} pid {server['pid']} on {server['host']} stuck in {where}" in text
    assert f"waits on:  {t['waits_for']}" in text


@pytest.mark.parametrize("name", ["legacy_run", "fully_async_run"])
def test_a_slowed_call_is_captured_while_it_is_slow(request, capsys, name):
    """Issue 37's capture on an anomaly, for a call that is only slow (not hung): the process that stalled records
    a sampling profile while it is still slow (py-spy, or its own sampler), and the capture's summary names the
    slowed frame among the frames its time was spent under (the TOP first: the sampling goes on past the call's end).
    Bounded per process (60 s apart): some of a run's stalls have none, at least one has."""
    from verl_otel.analysis import captures

    run = request.getfixturevalue(name)
    assert run.rc == 0, run.log_tail()
    doc = _doctor(run.out, capsys)
    workers = [r for r in doc["stalls"] if r["process_role"] == sc.PROCESS_ROLE_WORKER and r["capture"]]
    assert workers, [(r["process_role"], r["phase"], r["call"], r["capture"]) for r in doc["stalls"]]
    named = []
    for rec in workers:
        got = captures.read(Path(rec["capture"]), top=TOP)
        assert got.samples > 0 and got.thread, captures.to_text(got)
        want = FRAMES.get(rec["phase"], FRAME)
        if any(want in h.frame for h in got.inclusive):  # py-spy names it by its qualified name
            named.append((rec, want))
    assert named, [captures.to_text(captures.read(Path(r["capture"]), top=TOP)) for r in workers]
    rec, want = named[0]
    assert main(["capture", rec["capture"], "--top", str(TOP)]) == 0
    assert want in capsys.readouterr().out


SYNC_STEP = 2  # separate_async_run's update_weights@2=3: the sync after step 2's update, its payload 3 s late
SEND = "slowed_send (cpu_checkpoint_engine.py:"  # the sender's transfer thread, where the demo's slow link is
RECEIVE = "_broadcast (cpu_checkpoint_engine.py:"  # a receiver awaiting the payload


def test_a_slow_weight_sync_through_a_checkpoint_engine_is_rooted_in_its_sender(separate_async_run, capsys):
    """separate_async syncs its standalone replicas through the demo's gloo checkpoint engine (a verl plugin). The
    actor worker's send and each replica worker's receive are async actor methods, which Ray runs in a compiled
    coroutine that shows no frame: the stall reads verl's own coroutine (hooks/weight_sync.py). The sender's record
    names the slowed frame; each replica's where it awaits the payload; the trainer's update_weights says whom it
    waits on; doctor makes them one incident rooted in the sender, the replicas and the trainer waiting."""
    run = separate_async_run
    assert run.rc == 0, run.log_tail()
    doc = _doctor(run.out, capsys)
    brief = [(r["process_role"], r["phase"], r["step"], r["call"], r["frame"]) for r in doc["stalls"]]
    sync = [r for r in doc["stalls"] if r["phase"] == sc.PHASE_UPDATE_WEIGHTS and r["step"] == SYNC_STEP]
    (sender,) = [r for r in sync if r["call"] == sc.CALL_WEIGHT_SEND] or [brief]
    assert sender["process_role"] == sc.PROCESS_ROLE_WORKER and sender["frame"].startswith(SEND), sender
    assert sender["waiting_on"] == "" and sender["kind"] == sc.STALL_COLLECTIVE and Path(sender["evidence"]).is_file()
    receivers = [r for r in sync if r["call"] == sc.CALL_WEIGHT_RECEIVE]
    assert receivers, brief
    for r in receivers:
        assert r["process_role"] == sc.PROCESS_ROLE_REPLICA_WORKER and r["frame"].startswith(RECEIVE), r
        assert r["waiting_on"] == sc.STALL_WAIT_AWAIT and r["pid"] != sender["pid"] and Path(r["evidence"]).is_file()
    (trainer,) = [r for r in sync if r["process_role"] == sc.PROCESS_ROLE_TRAINER] or [brief]
    assert "train_worker call update_weights" in trainer["waits_for"], trainer
    (inc,) = [i for i in doc["incidents"] if i["root"]["evidence"] == sender["evidence"]]
    waiting = {(x["process_role"], x["call"]) for x in inc["waiting"]}
    assert (sc.PROCESS_ROLE_TRAINER, sc.PHASE_UPDATE_WEIGHTS) in waiting, inc
    assert (sc.PROCESS_ROLE_REPLICA_WORKER, sc.CALL_WEIGHT_RECEIVE) in waiting, inc
    assert main(["doctor", "--dir", str(run.out)]) == 0
    text = capsys.readouterr().out
    where = f"{sender['call']} at {sender['frame']}"
    assert f"{sc.PROCESS_ROLE_WORKER} pid {sender['pid']} on {sender['host']} stuck in {where}" in text, text
