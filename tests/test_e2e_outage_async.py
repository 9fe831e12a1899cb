"""fully_async with the Collector away until after the run: its fit()s are coroutines (the trainer's and the
rollouter's, two Ray actors), and each asks the worker processes it holds to flush or write their spans to
``unsent/`` at its fit end, as a sync fit() does (Ray ends workers without ``atexit``). ``verl-otel push`` then
delivers the agent-loop workers' spans under the rollouter's windows and the training workers' calls under each
step. Before, only the trainer's and the rollouter's own files existed and the workers' spans were lost."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from helpers.outage import refused_until_after
from helpers.verl_runs import DemoRun

from verl_otel import semconv as sc
from verl_otel.analysis.step_traces import Span

pytestmark = pytest.mark.verl
STEPS = 2


@dataclass
class Pushed:
    run: DemoRun
    files: list[str]  # unsent/ after the run, before push
    push_rc: int
    spans: list[Span]


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    with refused_until_after(tmp_path_factory.mktemp("fully-async-outage"), "fully_async", STEPS) as o:
        with o.rx.received.lock:
            spans = list(o.rx.received.spans)
        yield Pushed(o.run, o.files, o.push_rc, spans)


def _roles(spans: list[Span], name: str) -> set[str]:
    return {s.resource.get(sc.RES_PROCESS_ROLE, "") for s in spans if s.name == name}


def test_the_workers_spans_waited_on_disk_and_push_delivered_them(pushed):
    p = pushed
    assert p.run.rc == 0, p.run.log_tail(3000)
    assert p.push_rc == 0 and len(p.files) >= 4, p.files  # trainer, rollouter and their workers
    assert not list((p.run.out / sc.UNSENT_DIR).glob("*.jsonl"))
    # the rollouter's agent-loop workers (reached by the rollouter's fit end), under its windows
    assert _roles(p.spans, sc.SPAN_ROLLOUT_WORKER) == {sc.PROCESS_ROLE_AGENT_LOOP}, _roles(
        p.spans, sc.SPAN_ROLLOUT_WORKER
    )
    assert _roles(p.spans, sc.SPAN_ROLLOUTER_GENERATE) == {sc.PROCESS_ROLE_ROLLOUTER}
    # the trainer's FSDP workers (reached by the trainer's fit end), in every step's trace
    for step in range(1, STEPS + 1):
        roots = [s for s in p.spans if s.name == sc.SPAN_STEP and s.attributes.get(sc.ATTR_GLOBAL_STEP) == step]
        traces = {s.trace_id for s in roots}
        assert len(traces) == 1, (step, traces)
        calls = {
            s.name
            for s in p.spans
            if s.trace_id in traces and s.resource.get(sc.RES_PROCESS_ROLE) == sc.PROCESS_ROLE_WORKER
        }
        assert {"worker.update_actor", "worker.compute_ref_log_prob"} <= calls, (step, sorted(calls))
    ids = {s.span_id for s in p.spans}
    assert [s.name for s in p.spans if s.parent_id and s.parent_id not in ids] == []
