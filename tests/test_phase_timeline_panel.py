"""The "Phase per process" state timeline's query (dashboards/timeline_panels.py) in a real Prometheus scraping four
processes in known states: each row takes the state its process is in (the trainer's running phase, an agent-loop
worker with samples in flight, a training worker with mini-batches left, a process doing none of these)."""

from __future__ import annotations

import pytest

from helpers.prom import MetricsEndpoint, PromServer, available

from verl_otel import semconv as sc
from verl_otel.dashboards import grafana, timeline_panels

pytestmark = pytest.mark.prometheus

_RUN = f'{sc.LABEL_PROJECT}="p",{sc.LABEL_EXPERIMENT}="e"'
PROCESSES = {
    sc.PROCESS_ROLE_TRAINER: f'verl_phase_active{{{_RUN},phase="rollout"}} 0\n'
    f'verl_phase_active{{{_RUN},phase="update_actor"}} 1',
    sc.PROCESS_ROLE_AGENT_LOOP: f'verl_rollout_samples_inflight{{{_RUN},rollout_worker="0",mode="train"}} 3',
    sc.PROCESS_ROLE_WORKER: 'verl_update_minibatches_completed{role="actor"} 2\n'
    'verl_update_minibatches_expected{role="actor"} 4\n'
    'verl_update_minibatches_completed{role="critic"} 4\n'
    'verl_update_minibatches_expected{role="critic"} 4',
    sc.PROCESS_ROLE_REWARD: f'verl_rollout_samples_inflight{{{_RUN},rollout_worker="1",mode="train"}} 0',
}
EXPECTED = {
    sc.PROCESS_ROLE_TRAINER: sc.PHASE_UPDATE_ACTOR,
    sc.PROCESS_ROLE_AGENT_LOOP: sc.PHASE_ROLLOUT,
    sc.PROCESS_ROLE_WORKER: sc.PHASE_UPDATE_ACTOR,  # the actor's update has mini-batches left; the critic's is done
    sc.PROCESS_ROLE_REWARD: timeline_panels.IDLE_TEXT,
}


def _page(process_role: str) -> str:
    run = _RUN if process_role != sc.PROCESS_ROLE_WORKER else ""  # a training worker's page carries no run labels
    return f"{PROCESSES[process_role]}\nverl_process_resident_memory_bytes{{{run}}} 1000000\n"


def test_each_process_row_takes_its_state(tmp_path):
    if not available():
        pytest.skip("prometheus not installed (`make prometheus`)")
    endpoints = {process_role: MetricsEndpoint(_page(process_role)).__enter__() for process_role in PROCESSES}
    try:
        config = {
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "verl",
                    "static_configs": [
                        {"targets": [e.address], "labels": {sc.LABEL_PROCESS_ROLE: process_role}}
                        for process_role, e in endpoints.items()
                    ],
                }
            ],
        }
        with PromServer(tmp_path, config=config) as prom:
            prom.wait_for('count(up{job="verl"} == 1) == 4')
            expr = timeline_panels.phase_per_process()
            for var, value in grafana.ALL_VALUES.items():
                expr = expr.replace(var, value)
            text = {float(v): t for v, t, _ in timeline_panels.PHASE_VALUES}
            got = {r["metric"][sc.LABEL_PROCESS_ROLE]: text[float(r["value"][1])] for r in prom.query(expr)}
    finally:
        for e in endpoints.values():
            e.__exit__(None, None, None)
    assert got == EXPECTED
