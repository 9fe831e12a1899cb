"""``verl-otel top`` over a run that spans hosts: the targets file (as the driver keeps it from Ray's store) lists
processes of two hosts, each /metrics page served by verl-otel's own exporter; the frame names both hosts, every
agent-loop worker with its host, and a stall with the host it is on. On one host nothing changes."""

from __future__ import annotations

import json
import time

from rich.console import Console

from verl_otel import semconv as sc
from verl_otel.export.prometheus import serve
from verl_otel.live.health_table import signals
from verl_otel.live.run_view import History, build_view
from verl_otel.live.sources import TargetsFile
from verl_otel.live.view import frame
from verl_otel.process.metrics import MetricStore


def _worker(index: int, done: int, stalled: bool = False) -> MetricStore:
    st = MetricStore()
    labels = (str(index), sc.MODE_TRAIN)
    for metric, value in ((sc.ROLLOUT_SAMPLES_COMPLETED, done), (sc.ROLLOUT_SAMPLES_EXPECTED, 8)):
        st.set(metric, labels, value)
    if stalled:
        st.set(sc.STALL_ACTIVE, (sc.PHASE_ROLLOUT,), 1.0)
    return st


def _render(path) -> str:
    view = build_view(TargetsFile(path).read())
    history = History()
    console = Console(width=160, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(frame(view, history, signals(view, history), now=time.time()))
    return console.export_text()


def test_top_shows_each_process_with_its_host(tmp_path):
    hosts = {"hostA": _worker(0, 8), "hostB": _worker(1, 3, stalled=True)}
    groups = []
    for host, store in hosts.items():
        port = serve(store, "127.0.0.1", 0)
        role = sc.PROCESS_ROLE_AGENT_LOOP
        groups.append({"targets": [f"127.0.0.1:{port}"], "labels": {sc.LABEL_PROCESS_ROLE: role, sc.LABEL_HOST: host}})
    (tmp_path / sc.PROM_TARGETS_FILE).write_text(json.dumps(groups))
    text = _render(tmp_path)
    assert "hosts: hostA (1), hostB (1)" in text, text
    assert "hostA/0" in text and "hostB/1" in text, text
    assert f"STALLED: {sc.PROCESS_ROLE_AGENT_LOOP} on hostB in {sc.PHASE_ROLLOUT}" in text, text
    (tmp_path / sc.PROM_TARGETS_FILE).write_text(json.dumps(groups[:1]))  # one host: no host shown
    one = _render(tmp_path)
    assert "hosts:" not in one and "hostA/0" not in one
