"""Real vLLM in verl's async trainers: `verl-otel demo --rollout vllm --trainer separate_async|fully_async`.

Both need a standalone vLLM replica (the demo starts its weight-receiving workers without a GPU placement
group, as it does for the stand-in) whose weights come through the demo's gloo checkpoint engine into vLLM's
workers, and verl 0.9.1's abort before a weight sync, which calls vLLM 0.32 with a keyword it no longer takes
(mapped by the demo's vLLM plugin). One 2-step run per trainer: it trains, vLLM's `llm_request` spans sit under
the samples of every replica, and (separate_async) vLLM's log-probs match the actor's after each sync.

The separate_async run is also the real stack's vLLM run: its only telemetry setting is OTEL_EXPORTER_OTLP_ENDPOINT,
pointing at the real Collector (`make stack-bin`), which exports to the real Jaeger (helpers/real_stack_vllm.py);
its spans are read back through Jaeger's /api/v3: every step's trace whole, its parents there, and vLLM's own
`llm_request` spans under the samples, from the vLLM server's process. The fully_async run writes the trace file."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import real_stack_vllm
from helpers.procs import clean_env
from helpers.real_stack import wait_until
from helpers.real_stack_vllm import VllmStackRun
from helpers.traces import load_spans, parent_chain, steps
from helpers.verl_log import step_metrics
from helpers.verl_runs import vllm_demo_cmd

from verl_otel import semconv as sc

pytestmark = pytest.mark.verl

STEPS = 2
ROLE = "verl.process.role"


@dataclass
class Run:
    trainer: str
    out: Path
    rc: int
    seconds: float
    spans: list  # from the trace file, or (through the real stack) from Jaeger

    @property
    def log(self) -> str:
        return (self.out / "demo.log").read_text(errors="replace")


def _complete(stacked: VllmStackRun) -> list:
    """Jaeger's spans once every step's trace holds vLLM's request spans (they come from another process and
    may reach Jaeger later); [] until then."""
    spans = stacked.jaeger_spans()
    by_step = steps(spans)
    if sorted(by_step) != list(range(STEPS + 1)):
        return []
    if not all(any(s.name == sc.SPAN_ENGINE_REQUEST for s in by_step[n].spans) for n in range(1, STEPS + 1)):
        return []
    return spans


@pytest.fixture(scope="module", params=["separate_async", "fully_async"])
def async_vllm_run(request, tmp_path_factory):
    from verl_otel.native import down

    trainer = request.param
    tmp = tmp_path_factory.mktemp(f"vllm-{trainer}")
    args = ["--trainer", trainer, "--steps", str(STEPS)]
    if trainer == "separate_async":
        stacked = real_stack_vllm.start(tmp, args, timeout_s=1200)
        try:
            spans = wait_until(lambda: _complete(stacked), timeout=90, every=2) or stacked.jaeger_spans()
        finally:
            down(stacked.stack.state)
        run = Run(trainer, stacked.out, stacked.rc, stacked.seconds, spans)
    else:
        cmd = vllm_demo_cmd(tmp, *args)
        t0 = time.monotonic()
        rc = subprocess.run(
            cmd, env=clean_env(), cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=1200
        ).returncode
        run = Run(trainer, tmp, rc, time.monotonic() - t0, load_spans(tmp / sc.TRACES_FILE) if rc == 0 else [])
    print(f"\n[test_e2e_vllm_async] real vLLM, {trainer} ({STEPS} steps): {run.seconds:.0f}s")
    return run


def test_the_async_trainer_runs_with_real_vllm(async_vllm_run):
    run = async_vllm_run
    assert run.rc == 0, run.log[-4000:]
    assert "[verl-otel] WARNING" not in run.log and "telemetry error" not in run.log, "our hooks stayed quiet"
    assert f"[verl-otel] step {STEPS}/{STEPS}" in run.log, run.log[-4000:]


def test_vllm_request_spans_sit_under_the_samples_of_every_replica(async_vllm_run):
    spans = async_vllm_run.spans
    requests = [s for s in spans if s.name == sc.SPAN_ENGINE_REQUEST]
    assert requests, "no llm_request span from vLLM"
    # fully_async's samples belong to the rollouter's own traces (generate / validate), the others to steps
    roots = {"fully_async": {sc.SPAN_ROLLOUTER_GENERATE, sc.SPAN_ROLLOUTER_VALIDATE}}.get(
        async_vllm_run.trainer, {"step"}
    )
    for req in requests:
        chain = parent_chain(req, spans)
        assert chain[:3] == [sc.SPAN_ENGINE_REQUEST, sc.SPAN_ROLLOUT_SAMPLE, sc.SPAN_ROLLOUT_WORKER], chain
        assert chain[-1] in roots, chain
        assert req.attributes[sc.ENGINE_ATTR_DECODE] >= 0 and req.attributes[sc.ENGINE_ATTR_COMPLETION_TOKENS] >= 1
    replicas = {r.attributes[sc.ATTR_ENGINE_REPLICA] for r in requests}
    # separate_async: the hybrid replica 0 and the standalone replica 1 both served; fully_async: its one
    assert replicas == ({0, 1} if async_vllm_run.trainer == "separate_async" else {0}), replicas


def test_separate_async_weights_reach_the_standalone_vllm(async_vllm_run):
    if async_vllm_run.trainer != "separate_async":
        pytest.skip("fully_async trains on the rollout's own log-probs (bypass mode): verl compares none")
    metrics = step_metrics(async_vllm_run.log)
    diffs = {
        n: m["training/rollout_probs_diff_max"] for n, m in metrics.items() if "training/rollout_probs_diff_max" in m
    }
    assert set(diffs) >= set(range(1, STEPS + 1)), sorted(metrics)
    assert all(d < 1e-3 for d in diffs.values()), diffs  # vLLM's log-probs are the actor's: the weights arrived


def test_through_the_real_stack_every_step_trace_is_whole_in_jaeger_with_vllms_spans(async_vllm_run):
    """separate_async pushed over OTLP to the real Collector: in Jaeger every step is one trace with every parent
    there, and each of vLLM's request spans, from the vLLM server's process, sits under an agent-loop worker's
    sample."""
    if async_vllm_run.trainer != "separate_async":
        pytest.skip("the fully_async run writes the trace file")
    by_step = steps(async_vllm_run.spans)
    assert sorted(by_step) == list(range(STEPS + 1)), {n: sorted({s.name for s in t.spans}) for n, t in by_step.items()}
    for number, tree in by_step.items():
        by_id = {s.span_id: s for s in tree.spans}
        orphans = [(s.name, s.parent_id) for s in tree.spans if s is not tree.root and s.parent_id not in by_id]
        assert not orphans, f"step {number}: parents missing in Jaeger: {orphans[:5]}"
        assert {s.trace_id for s in tree.spans} == {tree.root.trace_id}
        if not number:
            continue  # step 0: validation before training
        requests = [s for s in tree.spans if s.name == sc.SPAN_ENGINE_REQUEST]
        assert requests, f"step {number}: no {sc.SPAN_ENGINE_REQUEST} span in Jaeger"
        for req in requests:
            sample = by_id[req.parent_id]
            assert sample.name == sc.SPAN_ROLLOUT_SAMPLE, (number, sample.name)
            assert by_id[sample.parent_id].name == sc.SPAN_ROLLOUT_WORKER, (number, by_id[sample.parent_id].name)
            # vLLM's span comes from the vLLM server's process, not from the agent-loop worker's
            assert req.resource.get(ROLE) == sc.PROCESS_ROLE_ROLLOUT_SERVER, req.resource
            assert sample.resource.get(ROLE) != sc.PROCESS_ROLE_ROLLOUT_SERVER, sample.resource
            assert isinstance(req.attributes.get(sc.ENGINE_ATTR_E2E), float), req.attributes
