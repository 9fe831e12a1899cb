"""One hang, one incident (analysis/incidents.py): synthetic stall records shaped like the planted hangs' (times,
roles, what each stuck frame waits on) grouped into incidents with their root and waiters, what the stalled
process says it waits on (process/stall_frames.py ``waiting_on``), and ``verl-otel doctor`` over evidence files."""

from __future__ import annotations

import json
import os

from verl_otel import semconv as sc
from verl_otel.analysis.incidents import group
from verl_otel.analysis.stall_records import StallRecord, advice, from_spans, merge
from verl_otel.analysis.step_traces import Span
from verl_otel.cli.main import main
from verl_otel.process import stall_frames
from verl_otel.process.stall_frames import TASK_IDENT, ThreadStack

T0 = 1_800_000_000.0
PLANTED = "planted_hang (slow.py:97)"


def rec(process_role: str, call: str, *, at: float, elapsed: float, waits: str | None = "", step: int | None = 2, **kw):
    """A stall caught ``at`` seconds after T0, its call in flight ``elapsed`` seconds by then."""
    return StallRecord(
        phase=kw.pop("phase", call),
        call=call,
        step=step,
        elapsed_s=elapsed,
        process_role=process_role,
        pid=kw.pop("pid", abs(hash((process_role, call))) % 10_000),
        host=kw.pop("host", "node-0"),
        waiting_on=waits,
        detected_at=T0 + at,
        **kw,
    )


def reward_hang(step: int = 2, t: float = 0.0) -> list[StallRecord]:
    """A reward function held in step ``step`` (the four stalls doctor listed for one hang before incidents)."""
    return [
        rec(
            sc.PROCESS_ROLE_TRAINER, sc.PHASE_ROLLOUT, at=t + 10, elapsed=10, waits=sc.STALL_WAIT_RAY, step=step, pid=1
        ),
        rec(
            sc.PROCESS_ROLE_AGENT_LOOP, sc.CALL_AGENT_SAMPLE, at=t + 5, elapsed=4, waits=sc.STALL_WAIT_AWAIT, step=step
        ),
        rec(
            sc.PROCESS_ROLE_REWARD,
            sc.CALL_REWARD,
            at=t + 4,
            elapsed=3,
            last_elapsed_s=15,
            frame=PLANTED,
            step=step,
            kind=sc.STALL_REWARD,
        ),
        rec(
            sc.PROCESS_ROLE_TRAINER, sc.PHASE_VALIDATE, at=t + 12, elapsed=3, waits=sc.STALL_WAIT_RAY, step=step, pid=1
        ),
    ]


def test_a_reward_hang_is_one_incident_rooted_in_the_reward_worker():
    records = merge(reward_hang(), [])
    [inc] = group(records)
    assert (
        inc.root.process_role == sc.PROCESS_ROLE_REWARD
        and inc.root.frame == PLANTED
        and inc.root_caught
        and inc.step == 2
    )
    assert "timeout" in inc.root.advice
    waiting = {(w.process_role, w.phase) for w in inc.waiting}
    assert waiting == {
        (sc.PROCESS_ROLE_AGENT_LOOP, sc.CALL_AGENT_SAMPLE),
        (sc.PROCESS_ROLE_TRAINER, sc.PHASE_ROLLOUT),
        (sc.PROCESS_ROLE_TRAINER, sc.PHASE_VALIDATE),
    }
    # the trainer's rollout stall no longer sends the user to vLLM's log: it points at the root
    trainer = next(w for w in inc.waiting if w.phase == sc.PHASE_ROLLOUT)
    assert "vLLM" not in trainer.advice and sc.PROCESS_ROLE_REWARD in trainer.advice
    d = inc.as_dict()
    assert d["step"] == 2 and d["root"]["process_role"] == sc.PROCESS_ROLE_REWARD and len(d["waiting"]) == 3
    assert {w["waiting_on"] for w in d["waiting"]} == {sc.STALL_WAIT_RAY, sc.STALL_WAIT_AWAIT}


def test_a_training_worker_hang_is_rooted_in_the_worker():
    worker = rec(
        sc.PROCESS_ROLE_WORKER, "worker.update_actor", phase=sc.PHASE_UPDATE_ACTOR, at=3, elapsed=3, frame=PLANTED
    )
    trainer = rec(sc.PROCESS_ROLE_TRAINER, sc.PHASE_UPDATE_ACTOR, at=3.2, elapsed=3.2, waits=sc.STALL_WAIT_RAY, pid=1)
    [inc] = group([trainer, worker])
    assert inc.root is worker and inc.waiting == [trainer] and not inc.peers


def test_an_llm_server_hang_is_rooted_in_the_server():
    server = rec(sc.PROCESS_ROLE_ROLLOUT_SERVER, sc.CALL_SERVER_REQUEST, at=3, elapsed=3, frame=PLANTED, step=None)
    samples = [
        rec(
            sc.PROCESS_ROLE_AGENT_LOOP, sc.CALL_AGENT_SAMPLE, at=4, elapsed=4, waits=sc.STALL_WAIT_HTTP, pid=pid, step=1
        )
        for pid in (11, 12)
    ]
    trainer = rec(sc.PROCESS_ROLE_TRAINER, sc.PHASE_ROLLOUT, at=10, elapsed=10, waits=sc.STALL_WAIT_RAY, step=1, pid=1)
    [inc] = group([*samples, trainer, server])
    assert inc.root is server and inc.step == 1
    assert {(w.process_role, w.pid) for w in inc.waiting} == {
        (sc.PROCESS_ROLE_AGENT_LOOP, 11),
        (sc.PROCESS_ROLE_AGENT_LOOP, 12),
        (
            sc.PROCESS_ROLE_TRAINER,
            1,
        ),
    }
    assert inc.waiting[-1] is trainer  # the deepest waiters first, the trainer last


def test_the_trace_decides_over_the_step():
    """Two stalls in one trace are in one step, whatever step one of them says (a record merged from an older
    file): the sample waits on the server's hang."""
    server = rec(
        sc.PROCESS_ROLE_ROLLOUT_SERVER, sc.CALL_SERVER_REQUEST, at=3, elapsed=3, frame=PLANTED, trace_id="b" * 32
    )
    sample = rec(sc.PROCESS_ROLE_AGENT_LOOP, sc.CALL_AGENT_SAMPLE, at=3, elapsed=3, waits=sc.STALL_WAIT_AWAIT, step=1)
    sample.trace_id = "b" * 32
    [inc] = group([sample, server])
    assert inc.root is server and inc.waiting == [sample]
    sample.trace_id = "c" * 32  # another trace and another step: not this hang's
    assert len(group([sample, server])) == 2


def test_two_unrelated_stalls_in_different_steps_are_two_incidents():
    first = reward_hang(step=1)
    worker = rec(sc.PROCESS_ROLE_WORKER, "worker.update_actor", at=300, elapsed=3, frame=PLANTED, step=3)
    trainer = rec(
        sc.PROCESS_ROLE_TRAINER, sc.PHASE_UPDATE_ACTOR, at=300, elapsed=3, waits=sc.STALL_WAIT_RAY, step=3, pid=1
    )
    found = group([*first, worker, trainer])
    assert [(i.step, i.root.process_role, len(i.waiting)) for i in found] == [
        (1, sc.PROCESS_ROLE_REWARD, 3),
        (3, sc.PROCESS_ROLE_WORKER, 1),
    ]
    # the same seconds but two steps (two runs' clocks, or a step that knows its number): not one hang either
    apart = group(
        [
            rec(sc.PROCESS_ROLE_REWARD, sc.CALL_REWARD, at=3, elapsed=3, step=1),
            rec(sc.PROCESS_ROLE_WORKER, "w", at=3, elapsed=3, step=2),
        ]
    )
    assert len(apart) == 2


def test_two_hangs_one_after_the_other_in_one_step():
    """The server hangs, then the reward function: the trainer's rollout stall (caught once per phase and step,
    during the first) waits on the first, not on both."""
    server = rec(sc.PROCESS_ROLE_ROLLOUT_SERVER, sc.CALL_SERVER_REQUEST, at=3, elapsed=3, last_elapsed_s=15, step=1)
    trainer = rec(
        sc.PROCESS_ROLE_TRAINER, sc.PHASE_ROLLOUT, at=10, elapsed=10, last_elapsed_s=28, waits=sc.STALL_WAIT_RAY
    )
    trainer.step = 1
    reward = rec(sc.PROCESS_ROLE_REWARD, sc.CALL_REWARD, at=26, elapsed=3, last_elapsed_s=15, step=1)
    found = group([server, trainer, reward])
    assert [(i.root.process_role, [w.process_role for w in i.waiting]) for i in found] == [
        (sc.PROCESS_ROLE_ROLLOUT_SERVER, [sc.PROCESS_ROLE_TRAINER]),
        (sc.PROCESS_ROLE_REWARD, []),
    ]


def test_the_same_pid_on_two_hosts_is_two_processes():
    a = rec(sc.PROCESS_ROLE_WORKER, "worker.update_actor", at=3, elapsed=3, frame="all_reduce (c10d.py:1)", pid=7)
    b = rec(sc.PROCESS_ROLE_WORKER, "worker.update_actor", at=3.5, elapsed=3, frame=PLANTED, pid=7, host="node-1")
    [inc] = group([a, b])
    assert {(r.host, r.pid) for r in inc.records()} == {("node-0", 7), ("node-1", 7)} and len(inc.peers) == 1
    # two stall spans alike but for the host: two records, not merged into one
    attrs = {sc.ATTR_PHASE: sc.PHASE_UPDATE_ACTOR, sc.ATTR_STALL_PID: 7, sc.ATTR_STALL_WAITING_ON: ""}
    spans = [
        Span("t" * 32, f"{i:016x}", "", sc.SPAN_STALL, 1, 2, attrs | {sc.ATTR_STALL_HOST: host})
        for i, host in enumerate(("node-0", "node-1"))
    ]
    merged = merge([], from_spans(spans))
    assert sorted(r.host for r in merged) == ["node-0", "node-1"]


def test_records_that_do_not_say_what_they_wait_on_fall_back_to_the_call_tree():
    old = [rec(r.process_role, r.call, at=0, elapsed=0, waits=None, step=2, pid=r.pid) for r in reward_hang()]
    [inc] = group(old)
    assert inc.root.process_role == sc.PROCESS_ROLE_REWARD and len(inc.waiting) == 3


def test_waiters_whose_root_was_not_caught():
    trainer = rec(sc.PROCESS_ROLE_TRAINER, sc.PHASE_ROLLOUT, at=10, elapsed=10, waits=sc.STALL_WAIT_RAY, pid=1)
    sample = rec(sc.PROCESS_ROLE_AGENT_LOOP, sc.CALL_AGENT_SAMPLE, at=5, elapsed=5, waits=sc.STALL_WAIT_HTTP)
    [inc] = group([trainer, sample])
    assert inc.root is sample and not inc.root_caught and inc.waiting == [trainer]
    assert "not caught" in inc.root.advice


def _stack(*files: str, ident: int = 1, func: str = "f") -> ThreadStack:
    return ThreadStack(ident, "t", tuple((f, 1, func) for f in files))


def test_what_a_stuck_stack_waits_on():
    verl = "/x/site-packages/verl/trainer/ppo/ray_trainer.py"
    ray_get = "/x/site-packages/ray/_private/worker.py"
    assert stall_frames.waiting_on(_stack(verl, ray_get)) == sc.STALL_WAIT_RAY
    assert stall_frames.waiting_on(_stack(verl, "/x/site-packages/aiohttp/client.py")) == sc.STALL_WAIT_HTTP
    assert stall_frames.waiting_on(_stack("/home/u/my_reward.py", "/usr/lib/python3.11/threading.py")) == ""
    assert stall_frames.waiting_on(_stack(verl, ident=TASK_IDENT)) == sc.STALL_WAIT_AWAIT
    assert stall_frames.waiting_on(_stack(ray_get, verl)) == ""  # Ray outside its frame: it works itself
    assert stall_frames.waiting_on(None) == ""
    poll = _stack(verl.replace("ray_trainer", "v1/replay_buffer"), func="_wait_for_next_poll")
    assert stall_frames.waiting_on(poll) == sc.STALL_WAIT_POLL  # v1's trainer sleeps between polls for samples
    # verl's NCCL checkpoint engine broadcasts through Ray's collective library: its own part of a collective
    nccl = "/x/site-packages/verl/checkpoint_engine/nccl_checkpoint_engine.py"
    assert stall_frames.waiting_on(_stack(nccl, "/x/site-packages/ray/util/collective/collective.py")) == ""


def test_a_slow_weight_sync_is_rooted_in_its_sender_the_receivers_beside_it():
    """A slow link: the actor's send and every replica's receive sit in the transfer (a collective, neither waits
    on a tracked call), the trainer waits on the sync. The sender is the root whichever side was caught first;
    the replicas are its peers, not roots of their own, and not deeper than it."""
    sync = {"phase": sc.PHASE_UPDATE_WEIGHTS, "kind": sc.STALL_COLLECTIVE}
    replicas = [
        rec(sc.PROCESS_ROLE_REPLICA_WORKER, sc.CALL_WEIGHT_RECEIVE, at=2.0, elapsed=2.0, pid=20 + i, **sync)
        for i in range(2)
    ]
    sender = rec(sc.PROCESS_ROLE_WORKER, sc.CALL_WEIGHT_SEND, at=2.5, elapsed=2.4, pid=10, **sync)
    trainer = rec(sc.PROCESS_ROLE_TRAINER, sc.PHASE_UPDATE_WEIGHTS, at=3, elapsed=3, waits=sc.STALL_WAIT_RAY, pid=1)
    [inc] = group([*replicas, sender, trainer])
    assert inc.root is sender and inc.root_caught
    assert advice(sender).startswith("the weight sync's transfer is slow or stuck"), advice(sender)
    assert {r.pid for r in inc.peers} == {20, 21} and inc.waiting == [trainer]
    # receivers that await the payload (their frames show the await) wait on it
    waiting = [
        rec(
            sc.PROCESS_ROLE_REPLICA_WORKER,
            sc.CALL_WEIGHT_RECEIVE,
            at=2.0,
            elapsed=2.0,
            pid=20 + i,
            waits=sc.STALL_WAIT_AWAIT,
            **sync,
        )
        for i in range(2)
    ]
    [inc] = group([*waiting, sender, trainer])
    assert inc.root is sender and not inc.peers and {r.pid for r in inc.waiting} == {1, 20, 21}


def test_a_shallower_process_whose_frames_show_no_wait_still_waits_on_the_deeper_one():
    server = rec(sc.PROCESS_ROLE_ROLLOUT_SERVER, sc.CALL_SERVER_REQUEST, at=3, elapsed=3, frame=PLANTED)
    trainer = rec(
        sc.PROCESS_ROLE_TRAINER, sc.PHASE_ROLLOUT, at=10, elapsed=10, pid=1
    )  # a sleep of its own: no wait seen
    [inc] = group([trainer, server])
    assert inc.root is server and inc.waiting == [trainer] and not inc.peers


def _write(stalls_dir, name: str, r: StallRecord, t: str, role_key: str = "process_role") -> None:
    rows = {
        "phase": r.phase,
        "call": r.call,
        "step": r.step if r.step is not None else -1,
        "elapsed_s": r.elapsed_s,
        "frame": r.frame,
        "kind": r.kind,
        "waiting_on": r.waiting_on,
        role_key: r.process_role,
        "pid": r.pid,
        "host": r.host,
        "time": t,
    }
    text = sc.STALL_FILE_MAGIC + "\n" + "".join(f"{k}: {v}\n" for k, v in rows.items()) + "\nstacks\n"
    if r.last_elapsed_s:
        text += f"{sc.STALL_REPEAT_MARK} after {r.last_elapsed_s:.0f}s; innermost: {r.frame}\nstacks\n"
    (stalls_dir / f"{name}.txt").write_text(text)


def test_doctor_says_one_incident_in_text_and_json(tmp_path, capsys, monkeypatch):
    stalls_dir = tmp_path / sc.STALLS_DIR
    stalls_dir.mkdir()
    for i, r in enumerate(reward_hang()):
        key = "role" if i == 0 else "process_role"  # a file of an older verl-otel: its process role is "role"
        _write(stalls_dir, f"s{i}", r, f"2026-01-01T00:00:{10 + int(r.detected_at - T0):02d}+0000", key)
        os.utime(stalls_dir / f"s{i}.txt")
    assert main(["doctor", "--dir", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [inc] = doc["incidents"]
    assert (
        inc["step"] == 2 and inc["root"]["process_role"] == sc.PROCESS_ROLE_REWARD and inc["root"]["frame"] == PLANTED
    )
    assert sorted(w["process_role"] for w in inc["waiting"]) == [
        sc.PROCESS_ROLE_AGENT_LOOP,
        sc.PROCESS_ROLE_TRAINER,
        sc.PROCESS_ROLE_TRAINER,
    ]
    assert len(doc["stalls"]) == 4
    assert all(r["role"] == r["process_role"] for r in doc["stalls"])  # the old key, for a release (CHANGELOG.md)
    assert all(w["role"] == w["process_role"] for w in inc["waiting"]) and inc["root"]["role"] == sc.PROCESS_ROLE_REWARD
    monkeypatch.setenv(sc.ENV_DEPRECATED_NAMES, "0")
    assert main(["doctor", "--dir", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "role" not in doc["stalls"][0] and "role" not in doc["incidents"][0]["root"], doc
    assert main(["doctor", "--dir", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert (
        text.startswith("run end:")
        and "\n\n1 incident in " in text
        and f"reward_worker pid {inc['root']['pid']} on node-0 stuck" in text
    )
    assert text.count("   waiting:   ") == 3 and "(a Ray call)" in text and "4 stalls in" in text


def test_the_console_line_says_what_a_waiter_waits_on():
    from verl_otel.process.stalls import Stall
    from verl_otel.progress.stall_line import stall_line

    args = (sc.PHASE_ROLLOUT, sc.PHASE_ROLLOUT, 2, 11.0, 10.0, "fit (trainer_base.py:477)", sc.STALL_ROLLOUT, "")
    waiter = Stall(*args, sc.PROCESS_ROLE_TRAINER, 1, "node-0", waiting_on=sc.STALL_WAIT_RAY)
    assert ", waiting on a Ray call [rollout_engine]" in stall_line(waiter)
    root = Stall(*args, sc.PROCESS_ROLE_ROLLOUT_SERVER, 2, "node-1")
    assert "waiting on" not in stall_line(root) and "verl-otel doctor" in stall_line(root)
