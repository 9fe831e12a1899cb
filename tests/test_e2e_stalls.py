"""A real demo run that hangs four times (``--hang reward@1``, ``update_actor@2``, ``rollout@2``,
``update_weights@2``) with stall thresholds of seconds: each hang is caught in the process it happens in (the
reward worker, the FSDP worker, the stand-in LLM server) with the planted frame in its evidence, its ``stall`` span
is in traces.jsonl while its step is still open, /metrics shows it, the console says it, and ``verl-otel doctor``
names phase, step and function, and makes each hang one incident: its root the planted process, the others waiting.
One run shared by every test here."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from helpers.verl_runs import start_demo

from verl_otel import semconv as sc
from verl_otel.analysis.otlp_json import read_file
from verl_otel.cli.main import main

pytestmark = pytest.mark.verl

HANG_S = 20
STALL_ENV = {
    sc.ENV_STALL_SECONDS: "10",
    sc.ENV_STALL_MIN_SECONDS: "3",
    sc.ENV_STALL_FACTOR: "3",
    sc.ENV_STALL_REPEAT_SECONDS: "6",
}


class StallProbe:
    """Called every half second while the run is up: the stall spans seen so far (and whether their step had
    ended when first seen) and the stall metrics of every process' /metrics."""

    def __init__(self) -> None:
        self.open_when_seen: dict[str, bool] = {}  # stall span id -> its step span not yet in the file
        self.metrics: dict[str, float] = {}  # "name{labels}" -> the highest value seen

    def __call__(self, out: Path) -> None:
        traces = out / sc.TRACES_FILE
        if traces.exists():
            spans = read_file(traces).spans
            ended = {s.trace_id for s in spans if s.name == sc.SPAN_STEP}
            for s in spans:
                if s.name == sc.SPAN_STALL and s.span_id not in self.open_when_seen:
                    self.open_when_seen[s.span_id] = s.trace_id not in ended
        try:
            targets = json.loads((out / sc.PROM_TARGETS_FILE).read_text())
        except (OSError, ValueError):
            return
        for group in targets:
            for target in group.get("targets", []):
                self._scrape(target)

    def _scrape(self, target: str) -> None:
        try:
            with urllib.request.urlopen(f"http://{target}/metrics", timeout=2) as resp:
                text = resp.read().decode()
        except OSError:
            return
        for line in text.splitlines():
            if line.startswith(("verl_stall_active{", "verl_stalls_total{")):
                series, _, value = line.rpartition(" ")
                self.metrics[series] = max(self.metrics.get(series, 0.0), float(value))


@pytest.fixture(scope="module")
def hung_run(tmp_path_factory):
    probe = StallProbe()
    run = start_demo(
        tmp_path_factory.mktemp("demo-hang"),
        "v1",
        3,
        [],
        scrape=False,
        probe=probe,
        hang=[f"reward@1={HANG_S}", f"update_actor@2={HANG_S}", f"rollout@2={HANG_S}", f"update_weights@2={HANG_S}"],
        extra_env=STALL_ENV,
    )
    run.extra["probe"] = probe
    return run


def _doctor(run, capsys, what: str = "stalls") -> list[dict]:
    assert main(["doctor", "--dir", str(run.out), "--json"]) == 0
    return json.loads(capsys.readouterr().out)[what]


def _one(records: list[dict], process_role: str, phase: str) -> dict:
    found = [r for r in records if r["process_role"] == process_role and r["phase"] == phase]
    assert found, [(r["process_role"], r["phase"], r["frame"]) for r in records]
    return found[0]


def test_the_run_ends_normally(hung_run):
    assert hung_run.rc == 0, hung_run.log_tail()


def test_the_reward_hang_is_caught_in_the_reward_worker(hung_run, capsys):
    rec = _one(_doctor(hung_run, capsys), sc.PROCESS_ROLE_REWARD, sc.CALL_REWARD)
    assert rec["frame"].startswith("planted_hang (slow.py:"), rec
    assert any(f.startswith("compute_score (hang_reward.py:") for f in rec["stack"]), rec
    assert rec["kind"] == sc.STALL_REWARD and rec["step"] == 1 and rec["in_trace"], rec
    text = Path(rec["evidence"]).read_text()
    assert text.startswith(sc.STALL_FILE_MAGIC) and "in planted_hang" in text
    assert sc.STALL_REPEAT_MARK in text  # stacks again after VERL_OTEL_STALL_REPEAT_SECONDS


def test_the_worker_hang_is_caught_in_the_fsdp_worker(hung_run, capsys):
    rec = _one(_doctor(hung_run, capsys), sc.PROCESS_ROLE_WORKER, sc.PHASE_UPDATE_ACTOR)
    assert rec["frame"].startswith("planted_hang (slow.py:"), rec
    assert rec["call"] == "worker.update_actor" and rec["step"] == 2 and rec["in_trace"], rec
    assert any("verl" in Path(rec["evidence"]).read_text() for _ in [0])
    # the trainer's own update_actor phase stalled too, waiting for the worker, at step 2
    trainer = _one(_doctor(hung_run, capsys), sc.PROCESS_ROLE_TRAINER, sc.PHASE_UPDATE_ACTOR)
    assert trainer["step"] == 2 and trainer["frame"], trainer
    assert trainer["waits_for"] == "1 train_worker call update_actor, rank 0", trainer  # whom, not only "unknown"


def test_stall_spans_are_in_the_file_while_their_step_is_open(hung_run):
    seen = hung_run.extra["probe"].open_when_seen
    assert len(seen) >= 2 and sum(seen.values()) >= 2, seen
    spans = read_file(hung_run.out / sc.TRACES_FILE).spans
    by_id = {s.span_id: s for s in spans}
    stalls = [s for s in spans if s.name == sc.SPAN_STALL]
    for stall in stalls:  # each under the span of the call or phase it stalled in
        assert stall.parent_id in by_id and by_id[stall.parent_id].trace_id == stall.trace_id, stall.name
    (send,) = [s for s in stalls if s.attributes.get(sc.ATTR_STALL_CALL) == sc.CALL_WEIGHT_SEND]
    sync = by_id[send.parent_id]  # the worker's weights.sync, under the trainer's update_weights of step 2
    assert sync.name == sc.SPAN_WEIGHT_SYNC and by_id[sync.parent_id].name == sc.PHASE_UPDATE_WEIGHTS
    assert by_id[sync.parent_id].attributes[sc.ATTR_GLOBAL_STEP] == 2
    steps = {s.attributes[sc.ATTR_GLOBAL_STEP]: s for s in spans if s.name == sc.SPAN_STEP}
    assert steps[2].attributes.get(sc.ATTR_STEP_STALLS, 0) >= 1
    assert steps[3].attributes.get(sc.ATTR_STEP_STALLS) == 0


def test_metrics_and_console_say_it(hung_run):
    metrics = hung_run.extra["probe"].metrics
    assert metrics.get('verl_stall_active{phase="update_actor"}') == 1.0, metrics
    assert metrics.get('verl_stalls_total{phase="reward.compute_score"}', 0) >= 1, metrics
    log = (hung_run.out / "demo.log").read_text(errors="replace")
    lines = [ln for ln in log.splitlines() if "[verl-otel] STALL:" in ln]
    assert any("planted_hang" in ln and sc.PROCESS_ROLE_REWARD in ln and "evidence: " in ln for ln in lines), lines
    assert not any("waiting on" in ln for ln in lines if "planted_hang" in ln), lines  # the roots work
    # the trainer's line says whom it waits on
    waits = ", waiting on 1 train_worker call update_actor, rank 0 ["
    assert any(f"{sc.PROCESS_ROLE_TRAINER} pid" in ln and waits in ln for ln in lines), lines


def test_doctor_names_phase_step_and_function(hung_run, capsys):
    assert main(["doctor", "--dir", str(hung_run.out)]) == 0
    text = capsys.readouterr().out
    assert "step 2, phase update_actor (worker.update_actor)" in text and "planted_hang (slow.py:" in text
    assert "reward_function" in text and "timeout" in text


def test_the_rollout_hang_is_caught_in_the_llm_server(hung_run, capsys):
    rec = _one(_doctor(hung_run, capsys), sc.PROCESS_ROLE_ROLLOUT_SERVER, sc.CALL_SERVER_REQUEST)
    assert rec["frame"].startswith("planted_hang (slow.py:"), rec
    assert any(f.startswith("_generate (standins.py:") for f in rec["stack"]), rec
    assert rec["kind"] == sc.STALL_ROLLOUT and rec["step"] == 2, rec


def test_the_weight_sync_hang_is_caught_in_the_checkpoint_engine(hung_run, capsys):
    records = _doctor(hung_run, capsys)
    rec = _one(records, sc.PROCESS_ROLE_WORKER, sc.PHASE_UPDATE_WEIGHTS)  # verl's worker-side update_weights, hooked
    assert rec["frame"].startswith("_wait_for_transfer (cpu_checkpoint_engine.py:"), rec
    assert rec["kind"] == sc.STALL_COLLECTIVE and rec["call"] == sc.CALL_WEIGHT_SEND and rec["step"] == 2, rec
    trainer = _one(records, sc.PROCESS_ROLE_TRAINER, sc.PHASE_UPDATE_WEIGHTS)
    assert trainer["step"] == 2 and trainer["waits_for"] == "1 train_worker call update_weights, rank 0", trainer
    assert main(["doctor", "--dir", str(hung_run.out)]) == 0
    assert "phase update_weights" in capsys.readouterr().out


def _incident(incidents: list[dict], process_role: str, call: str) -> dict:
    found = [i for i in incidents if i["root"]["process_role"] == process_role and i["root"]["call"] == call]
    assert len(found) == 1, [(i["step"], i["root"]["process_role"], i["root"]["call"]) for i in incidents]
    return found[0]


def _waiting(incident: dict) -> set[tuple[str, str]]:
    assert all(w["waiting_on"] in sc.STALL_WAITS for w in incident["waiting"]), incident  # said by the process
    return {(w["process_role"], w["call"]) for w in incident["waiting"]}


def test_each_hang_is_one_incident_rooted_where_it_was_planted(hung_run, capsys):
    incidents = _doctor(hung_run, capsys, "incidents")
    # four planted hangs, four incidents with a caught root; every other stall waits on one of them (a slow first
    # validation, step 0, on a loaded machine may stall on its own: an incident of its own, caught or not)
    caught = [i for i in incidents if i["root_caught"] and i["step"] != 0]
    assert len(caught) == 4 and not any(i["peers"] for i in incidents), incidents
    planted = "planted_hang (slow.py:"
    reward = _incident(caught, sc.PROCESS_ROLE_REWARD, sc.CALL_REWARD)
    assert reward["step"] == 1 and reward["root"]["frame"].startswith(planted), reward
    assert _waiting(reward) == {
        (sc.PROCESS_ROLE_AGENT_LOOP, sc.CALL_AGENT_SAMPLE),
        (sc.PROCESS_ROLE_TRAINER, sc.PHASE_ROLLOUT),
    }
    assert "timeout" in reward["root"]["advice"]
    server = _incident(caught, sc.PROCESS_ROLE_ROLLOUT_SERVER, sc.CALL_SERVER_REQUEST)
    assert server["step"] == 2 and server["root"]["frame"].startswith(planted), server
    assert _waiting(server) == {
        (sc.PROCESS_ROLE_AGENT_LOOP, sc.CALL_AGENT_SAMPLE),
        (sc.PROCESS_ROLE_TRAINER, sc.PHASE_ROLLOUT),
    }
    worker = _incident(caught, sc.PROCESS_ROLE_WORKER, "worker.update_actor")
    assert worker["step"] == 2 and worker["root"]["frame"].startswith(planted), worker
    assert _waiting(worker) == {(sc.PROCESS_ROLE_TRAINER, sc.PHASE_UPDATE_ACTOR)}
    weights = _incident(caught, sc.PROCESS_ROLE_WORKER, sc.CALL_WEIGHT_SEND)
    assert weights["root"]["frame"].startswith("_wait_for_transfer (cpu_checkpoint_engine.py:"), weights
    assert _waiting(weights) == {(sc.PROCESS_ROLE_TRAINER, sc.PHASE_UPDATE_WEIGHTS)}
    # an agent-loop worker stalled in both hangs' steps: a file each (step-unknown, told apart by the trace)
    samples = [r for r in _doctor(hung_run, capsys) if r["process_role"] == sc.PROCESS_ROLE_AGENT_LOOP]
    assert len({r["evidence"] for r in samples}) == len(samples) >= 2, samples
    # no agent-loop stall left on its own: each one waits on a caught root
    assert all(i["root"]["process_role"] != sc.PROCESS_ROLE_AGENT_LOOP for i in incidents), incidents
    assert main(["doctor", "--dir", str(hung_run.out)]) == 0
    text = capsys.readouterr().out
    assert f"{len(incidents)} incidents in " in text and "   waiting:   trainer pid " in text


def test_each_planted_hang_was_captured_while_it_hung(hung_run, capsys):
    """py-spy recorded the reward worker and the FSDP worker while their calls hung: each capture opens on the stuck
    thread, whose innermost frame is the planted one, and doctor prints it."""
    from verl_otel.analysis import captures

    hung = [
        r
        for r in _doctor(hung_run, capsys)
        if (r["process_role"], r["phase"])
        in ((sc.PROCESS_ROLE_REWARD, sc.CALL_REWARD), (sc.PROCESS_ROLE_WORKER, sc.PHASE_UPDATE_ACTOR))
    ]
    assert len(hung) == 2, hung
    for rec in hung:
        assert rec["capture"].endswith(sc.CAPTURE_SUFFIX) and Path(rec["capture"]).is_file(), rec
        got = captures.read(Path(rec["capture"]))
        assert got.thread and got.samples > 50, (rec["process_role"], captures.to_text(got))
        assert got.innermost[0].frame.startswith("planted_hang (slow.py:"), (rec["process_role"], captures.to_text(got))
    assert main(["doctor", "--dir", str(hung_run.out)]) == 0
    text = capsys.readouterr().out
    assert text.count("   capture:   ") >= 2 and "planted_hang (slow.py:" in text.split("   capture:   ", 1)[1]
