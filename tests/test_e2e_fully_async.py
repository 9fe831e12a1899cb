"""verl's experimental fully_async trainer on the CPU demo (`verl-otel demo --trainer fully_async`): its own
entry point (fully_async_main), a FullyAsyncRollouter actor with a standalone stand-in replica streaming
samples through verl's MessageQueue to a FullyAsyncTrainer actor with verl's real FSDP2 DetachActorWorker,
weights synced after every step over the demo's gloo checkpoint engine. 3 steps, validation every 2
parameter versions. The run is shared by this module's tests (conftest fixture, scraped by Prometheus)."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from helpers.traces import event_names, load_spans, parent_chain, step_tokens, steps

from verl_otel import semconv as sc
from verl_otel.analysis.step_traces import Span

pytestmark = pytest.mark.verl

TRAIN_PHASES = {sc.PHASE_ROLLOUT, sc.PHASE_REWARD, sc.PHASE_REF, sc.PHASE_ADV, sc.PHASE_UPDATE_ACTOR, "param_sync"}


def _spans(run) -> list[Span]:
    assert run.rc == 0, run.log_tail()
    return load_spans(run.out / "traces.jsonl")


def test_each_trained_step_is_one_trace_then_a_stop_and_fit_end(fully_async_run):
    run = fully_async_run
    spans = _spans(run)
    by_step = steps(spans)
    trained = {n: t for n, t in by_step.items() if not t.root.attributes.get(sc.ATTR_STOPPED)}
    assert sorted(trained) == list(range(1, run.steps + 1)), sorted(by_step)
    for number, tree in trained.items():
        root = tree.root
        assert root.attributes[sc.ATTR_TRAINER] == sc.TRAINER_FULLY_ASYNC and not root.status_error
        assert root.resource[sc.RES_PROCESS_ROLE] == sc.PROCESS_ROLE_TRAINER
        names = Counter(s.name for s in tree.spans)
        assert set(names) >= TRAIN_PHASES, (number, names)
        assert names["param_sync"] == 1  # trigger_parameter_sync_step=1: a weight sync per step
        # the trainer asks the rollouter to validate at parameter versions divisible by test_freq (2)
        assert (sc.PHASE_VALIDATE in names) == (number % 2 == 0), (number, names)
        assert (sc.PHASE_SAVE_CHECKPOINT in names) == (number == run.steps), (number, names)
        for s in tree.spans:
            assert parent_chain(s, tree.spans)[-1] == sc.SPAN_STEP, parent_chain(s, tree.spans)
        # verl's real FSDP2 worker calls join the step's trace
        assert names["worker.update_actor"] >= 1 and names["worker.compute_ref_log_prob"] >= 1, names
        # and the actor's side of the weight sync (the gloo engine), under param_sync: its id derived from the trace
        (sync,) = [s for s in tree.spans if s.name == sc.PHASE_PARAM_SYNC]
        parts = [s for s in tree.spans if s.name == sc.SPAN_WEIGHT_SYNC and s.parent_id == sync.span_id]
        assert parts and all(p.attributes[sc.ATTR_WSYNC_MODE] == "cpu_gloo" for p in parts), number
        # and the replica's side, in its CheckpointEngineWorker: every byte the actor sent, under the same param_sync
        received = [s for s in tree.spans if s.name == sc.SPAN_WEIGHT_RECEIVE and s.parent_id == sync.span_id]
        assert received and {r.attributes[sc.ATTR_WSYNC_BYTES] for r in received} == {
            p.attributes[sc.ATTR_WSYNC_BYTES] for p in parts
        }, number
        assert all(r.attributes[sc.ATTR_GLOBAL_STEP] == number for r in received), number
    # the queue's end: the next fit_step finds it closed (TrainingStopException), a stop, not an error
    (stopped,) = [t.root for t in by_step.values() if t.root.attributes.get(sc.ATTR_STOPPED)]
    assert stopped.attributes[sc.ATTR_GLOBAL_STEP] == run.steps + 1 and not stopped.status_error
    assert not [s for s in spans if s.status_error]
    # what verl runs after its loop (a last weight sync: 3 % test_freq != 0) is no step of its own
    (end,) = [s for s in spans if s.name == sc.SPAN_FIT_END]
    assert not end.parent_id and end.attributes[sc.ATTR_GLOBAL_STEP] == run.steps
    under_end = Counter(s.name for s in spans if s.trace_id == end.trace_id)
    assert under_end["param_sync"] == 1 and sc.PHASE_ROLLOUT not in under_end, under_end


def test_rollouter_windows_and_the_links_from_each_step(fully_async_run):
    """The rollouter is its own process role with one span per parameter-version window; each trained step
    links to the windows whose samples it took, with their staleness."""
    run = fully_async_run
    spans = _spans(run)
    windows = {s.attributes[sc.ATTR_PARAM_VERSION]: s for s in spans if s.name == sc.SPAN_ROLLOUTER_GENERATE}
    assert sorted(windows) == list(range(len(windows))) and len(windows) >= run.steps, sorted(windows)
    assert all(
        w.resource[sc.RES_PROCESS_ROLE] == sc.PROCESS_ROLE_ROLLOUTER and not w.parent_id for w in windows.values()
    )
    # 2 prompts per step (ppo_mini_batch_size) x 3 steps, each window counts what it put in the queue
    assert sum(w.attributes.get(sc.ATTR_ASYNC_SAMPLES, 0) for w in windows.values()) == 2 * run.steps
    by_step = steps(spans)
    for number in range(1, run.steps + 1):
        root = by_step[number].root
        step_links = root.links
        assert sum(ln.attributes[sc.ATTR_ASYNC_SAMPLES] for ln in step_links) == 2, (number, step_links)
        for ln in step_links:
            version = ln.attributes[sc.ATTR_PARAM_VERSION]
            assert (ln.trace_id, ln.span_id) == (windows[version].trace_id, windows[version].span_id)
            # trained at parameter version number-1 (one sync per step)
            assert ln.attributes[sc.ATTR_STALENESS] == number - 1 - version >= 0
    # the window's slowest samples, measured at the rollouter, under their window
    samples = [
        s
        for s in spans
        if s.name == sc.SPAN_ROLLOUT_SAMPLE and s.resource[sc.RES_PROCESS_ROLE] == sc.PROCESS_ROLE_ROLLOUTER
    ]
    assert len(samples) == 2 * run.steps
    for s in samples:
        assert parent_chain(s, spans) == [sc.SPAN_ROLLOUT_SAMPLE, sc.SPAN_ROLLOUTER_GENERATE]
        assert s.attributes[sc.ATTR_SAMPLE_RESPONSE_TOKENS] > 0


def test_trained_steps_and_phases_carry_the_assembled_batchs_tokens(fully_async_run):
    """The trainer's batch assembled from the queue's samples (2 prompts x n 2, responses up to 16 tokens, prompts
    up to 32) gives the step and its token phases their tokens, and the per-1k-tokens gauge its samples."""
    run = fully_async_run
    spans = _spans(run)
    by_step = steps(spans)
    responses = 0
    for number in range(1, run.steps + 1):
        prompt, response = step_tokens(by_step[number])
        assert 4 <= prompt <= 4 * 32 and 4 <= response <= 4 * 16, (number, prompt, response)
        responses += response
    # each prompt group (a rollouter sample: its longest response) is trained on once
    groups = [
        s
        for s in spans
        if s.name == sc.SPAN_ROLLOUT_SAMPLE and s.resource[sc.RES_PROCESS_ROLE] == sc.PROCESS_ROLE_ROLLOUTER
    ]
    assert responses >= sum(s.attributes[sc.ATTR_SAMPLE_RESPONSE_TOKENS] for s in groups) > 0
    per_1k = run.prom.scalar_by(sc.PHASE_S_PER_1K_TOKENS.name, "phase")
    assert {sc.PHASE_ROLLOUT, sc.PHASE_REF, sc.PHASE_UPDATE_ACTOR} <= set(per_1k) and min(per_1k.values()) > 0, per_1k


def test_agent_loop_workers_join_the_rollouter_traces(fully_async_run):
    """The rollouter sends each prompt group to an agent-loop worker on its own: the worker's rollout.worker
    span (and its rollout.sample spans) joins the window the sample started in, or the validation."""
    spans = _spans(fully_async_run)
    workers = [s for s in spans if s.name == sc.SPAN_ROLLOUT_WORKER]
    assert workers and all(w.resource[sc.RES_PROCESS_ROLE] == sc.PROCESS_ROLE_AGENT_LOOP for w in workers)
    parents = Counter((w.attributes[sc.ATTR_MODE], tuple(parent_chain(w, spans)[1:])) for w in workers)
    want = {(sc.MODE_TRAIN, (sc.SPAN_ROLLOUTER_GENERATE,)), (sc.MODE_VALIDATE, (sc.SPAN_ROLLOUTER_VALIDATE,))}
    assert set(parents) == want, parents
    # every trajectory trained on was generated in a spanned worker call (2 prompts x n=2 per step;
    # calls that overlap on one worker share its span, as an async trainer's chunks do)
    trajectories = sum(w.attributes[sc.ATTR_SAMPLES] for w in workers if w.attributes[sc.ATTR_MODE] == sc.MODE_TRAIN)
    assert trajectories >= 2 * 2 * fully_async_run.steps, trajectories
    for s in spans:
        if s.name == sc.SPAN_ROLLOUT_SAMPLE and s.resource[sc.RES_PROCESS_ROLE] == sc.PROCESS_ROLE_AGENT_LOOP:
            assert parent_chain(s, spans)[-1] in (sc.SPAN_ROLLOUTER_GENERATE, sc.SPAN_ROLLOUTER_VALIDATE)


def test_rollouter_validation_carries_the_validation_generations(fully_async_run):
    """Seed 001's gap: the rollouter (no tracker of its own) validates; its generations are events of its
    rollouter.validate span (counted, no text without VERL_OTEL_CAPTURE_TEXT)."""
    spans = _spans(fully_async_run)
    vals = [s for s in spans if s.name == sc.SPAN_ROLLOUTER_VALIDATE]
    # before training (val_before_train) and at parameter version 2
    assert len(vals) == 2, [s.attributes for s in vals]
    for span in vals:
        assert span.resource[sc.RES_PROCESS_ROLE] == sc.PROCESS_ROLE_ROLLOUTER
        assert span.attributes[sc.ATTR_VAL_GENERATIONS] == 2
        assert event_names(span).count(sc.EVENT_VAL_GENERATION) == 2


def test_console_lines_of_both_services(fully_async_run):
    run = fully_async_run
    assert run.rc == 0, run.log_tail()
    log = (run.out / "demo.log").read_text(errors="replace")
    numbers = [
        int(m[1])
        for m in re.finditer(
            r"\[verl-otel\] step (\d+)/3 took .* \| param version \d+, "
            r"staleness max \d+ mean [\d.]+",
            log,
        )
    ]
    assert numbers == [1, 2, 3], numbers  # no line for the stop or for fit.end
    windows = re.findall(r"\[verl-otel\] rollouter param version (\d+): (\d+) samples queued, \d+ dropped", log)
    assert sum(int(n) for _, n in windows) == 2 * run.steps, windows


def test_async_gauges_and_panels_on_real_prometheus(fully_async_run):
    """Prometheus scraped the rollouter's and the trainer's /metrics (file_sd): the fully_async panels, as
    Grafana sends them, all have data; the versions and counts match the run."""
    from verl_otel.dashboards import all_expressions, concrete
    from verl_otel.dashboards.async_panels import _ASYNC_ONLY

    run = fully_async_run
    prom = run.prom
    assert run.rc == 0 and run.query_time is not None, run.log_tail()
    exprs = [(where, expr) for where, expr, why in all_expressions() if why == _ASYNC_ONLY]
    assert len(exprs) >= 9
    assert [where for where, expr in exprs if not prom.query(concrete(expr))] == []
    versions = prom.scalar_by(f"max by ({sc.LABEL_SIDE}) ({sc.ASYNC_PARAM_VERSION.name})", sc.LABEL_SIDE)
    # the trainer trained at versions 0..2 and synced 3; the rollouter's last window is the one the
    # post-loop sync opened (fit.end), as in its traces
    last_window = max(s.attributes[sc.ATTR_PARAM_VERSION] for s in _spans(run) if s.name == sc.SPAN_ROLLOUTER_GENERATE)
    assert versions == {sc.PROCESS_ROLE_TRAINER: float(run.steps), sc.PROCESS_ROLE_ROLLOUTER: float(last_window)}, (
        versions
    )
    assert prom.scalar_by(f"sum({sc.ASYNC_SAMPLES_PRODUCED.name})") == {(): 2.0 * run.steps}
    assert prom.scalar_by("sum(verl_step_duration_seconds_count)") == {(): float(run.steps)}
