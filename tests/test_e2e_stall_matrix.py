"""Stall evidence from the process doing the stalled work, on the shared real runs (conftest.py): each run slows
some training-worker calls for 3-4 s inside verl's engine (``--slow PHASE@STEP=S``, as a really slow call would be,
no planted hang) under thresholds those seconds pass (helpers/verl_runs.py::STALL_MATRIX). Per cell (trainer mode x
hooked call): the training worker that did the work wrote evidence naming its frame, pid and host; the trainer's
stalled phase says whom it waits on ("1 train_worker call compute_log_prob, rank 0"), not only "unknown"; doctor
makes them one incident rooted in the worker. The cells not here: docs/guides/hangs.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_otel import semconv as sc
from verl_otel.cli.main import main

pytestmark = pytest.mark.verl

FRAME = "slowed_forward (cpu_plugin.py:"  # where the demo's slowed call spends its time, inside verl's engine
#: (shared run, slowed phase, the worker method the trainer calls for it, the step slowed: --slow counts a process'
#: calls of the method)
CELLS = [
    ("v1_run", sc.PHASE_UPDATE_ACTOR, "update_actor", 3),
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
        assert w["frame"].startswith(FRAME) and w["waiting_on"] == "" and w["pid"] and w["host"], w
        assert w["call"] == sc.WORKER_SPAN_NAMES[method] and Path(w["evidence"]).is_file(), w
    # one incident: a slowed worker its root (each rank was slowed: any may be the root), the trainer waiting on it
    by_evidence = {w["evidence"]: w for w in workers}
    (inc,) = [i for i in doc["incidents"] if i["root"]["evidence"] in by_evidence]
    w = by_evidence[inc["root"]["evidence"]]
    assert (sc.PROCESS_ROLE_TRAINER, phase) in {(x["process_role"], x["phase"]) for x in inc["waiting"]}, inc
    assert main(["doctor", "--dir", str(run.out)]) == 0
    text = capsys.readouterr().out
    assert f"{sc.PROCESS_ROLE_WORKER} pid {w['pid']} on {w['host']} stuck in {w['call']} at {w['frame']}" in text
    assert f"waits on:  {t['waits_for']}" in text
