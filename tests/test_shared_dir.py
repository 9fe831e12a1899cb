"""One ``VERL_OTEL_DIR`` on a shared filesystem, two hosts writing to it (simulated by ``VERL_OTEL_HOSTNAME``,
the one place the code reads its host's name), their processes with the same pid (containers, pods): nothing is
overwritten, nothing merged, and the targets file keeps the other host's processes whose pids mean nothing here."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from verl_otel import config as cfg
from verl_otel import semconv as sc
from verl_otel.analysis import stall_records
from verl_otel.config import StallSettings
from verl_otel.export import prometheus
from verl_otel.export.spool import unsent_path
from verl_otel.export.stall_evidence import EvidenceFiles
from verl_otel.hooks.ray_env import job_env
from verl_otel.process.metrics import MetricStore
from verl_otel.process.stalls import StallWatch


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _groups(data: Path) -> list[dict]:
    return json.loads((data / sc.PROM_TARGETS_FILE).read_text())


def test_the_hostname_comes_from_one_place(monkeypatch):
    monkeypatch.setenv(sc.ENV_HOSTNAME, "node a/1")
    assert cfg.hostname() == "node_a_1"  # safe in a file name
    assert unsent_path(Path("/d")).name.startswith("spans-node_a_1-")
    assert sc.ENV_HOSTNAME not in job_env(), "a host's name is not forwarded to the other nodes"
    monkeypatch.delenv(sc.ENV_HOSTNAME)
    import socket

    assert cfg.hostname() == socket.gethostname()[:64]


def test_targets_of_another_host_are_kept_and_this_hosts_dead_ones_pruned(tmp_path, monkeypatch):
    dead = _dead_pid()
    stale_b = {"targets": ["10.0.0.2:9"], "labels": {sc.LABEL_HOST: "hostB", prometheus.PID_LABEL: str(dead)}}
    stale_a = {"targets": ["10.0.0.1:9"], "labels": {sc.LABEL_HOST: "hostA", prometheus.PID_LABEL: str(dead)}}
    old_release = {"targets": ["127.0.0.1:8"], "labels": {prometheus.PID_LABEL: str(dead)}}  # no host: by address
    (tmp_path / sc.PROM_TARGETS_FILE).write_text(json.dumps([stale_b, stale_a, old_release]))
    monkeypatch.setenv(sc.ENV_HOSTNAME, "hostA")
    mine = prometheus.register_target(tmp_path, "10.0.0.1", 7, {sc.LABEL_PROCESS_ROLE: sc.PROCESS_ROLE_TRAINER})
    got = _groups(tmp_path)
    assert stale_b in got, "hostB's process is judged on hostB, not on hostA where its pid is not alive"
    assert stale_a not in got and old_release not in got, "this host's dead processes are pruned"
    monkeypatch.setenv(sc.ENV_HOSTNAME, "hostB")
    theirs = prometheus.register_target(tmp_path, "10.0.0.2", 7, {sc.LABEL_PROCESS_ROLE: sc.PROCESS_ROLE_WORKER})
    got = _groups(tmp_path)
    assert mine in got and theirs in got, "the same pid on two hosts: two entries"
    assert stale_b not in got, "on hostB, hostB's dead process is pruned"
    assert mine["labels"][sc.LABEL_HOST] == "hostA" and theirs["labels"][sc.LABEL_HOST] == "hostB"
    assert mine["labels"][prometheus.PID_LABEL] == theirs["labels"][prometheus.PID_LABEL]
    prometheus.unregister_target(tmp_path, "10.0.0.2", 7)
    assert _groups(tmp_path) == [mine]


def _stall_on(host: str, stalls_dir: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A real stall watch of ``host`` (this process, same pid for both) catching a stuck reward call of step 4."""
    monkeypatch.setenv(sc.ENV_HOSTNAME, host)
    tracer = TracerProvider().get_tracer("t")
    watch = StallWatch(
        StallSettings(seconds=0.1, min_seconds=0.1, factor=3.0, repeat_s=60),
        tracer=lambda: tracer,
        store=MetricStore(),
        flush_soon=lambda: None,
        evidence=EvidenceFiles(stalls_dir, py_spy=""),
        process_role=lambda: sc.PROCESS_ROLE_REWARD,
    )
    watch.stop()  # ticked by hand
    token = watch.enter(sc.PHASE_REWARD, step=4)
    try:
        deadline = time.monotonic() + 5
        while not watch.stalls() and time.monotonic() < deadline:
            watch.check()
            time.sleep(0.05)
        [stall] = watch.stalls()
        return stall.evidence
    finally:
        watch.exit(token)


def test_two_hosts_same_pid_keep_their_own_stall_evidence(tmp_path, monkeypatch):
    shared = tmp_path / sc.STALLS_DIR
    a = _stall_on("hostA", shared, monkeypatch)
    b = _stall_on("hostB", shared, monkeypatch)
    assert a != b and Path(a).exists() and Path(b).exists(), "neither file overwrote the other"
    assert "-hostA-" in Path(a).name and "-hostB-" in Path(b).name
    records = stall_records.merge(stall_records.read_dir(shared), [])
    assert sorted((r.host, r.pid) for r in records) == [("hostA", records[0].pid), ("hostB", records[0].pid)]
    # the spans naming the same files (as a gathered folder sees them: another folder, the same names) merge
    # with their own host's file only
    spans = [
        stall_records.StallRecord(phase=r.phase, pid=r.pid, host=r.host, evidence=f"/elsewhere/{Path(r.evidence).name}")
        for r in records
    ]
    for s, r in zip(spans, records, strict=True):
        s.trace_id, s.in_trace = f"trace-{r.host}", True
    merged = stall_records.merge(stall_records.read_dir(shared), spans)
    assert sorted((r.host, r.trace_id) for r in merged) == [("hostA", "trace-hostA"), ("hostB", "trace-hostB")]


def test_stalls_without_files_merge_by_host_too():
    one = stall_records.StallRecord(phase="reward", pid=7, host="hostA", trace_id="t")
    other = stall_records.StallRecord(phase="reward", pid=7, host="hostB", trace_id="t")
    assert len(stall_records.merge([], [one, other])) == 2
