"""Agentic rollouts on a real Ray run (issue 35): the shared ``colocate_async_run`` runs verl's real
``ToolAgentLoop`` with the demo's tools (``verl-otel demo --agent tool``: a search ``BaseTool`` with a lifecycle, an
``@function_tool`` sandbox running a subprocess, the stand-in LLM calling them over 3 turns). In step 2 the first
search call hangs and every search call raises (a backend gone down). What a user asks of it, on what the run
wrote and what a real Prometheus scraped from its agent-loop workers: every turn and tool call in the step's trace,
every outcome counted, the failing tool alerted on, the hung call named by ``slow-steps`` and ``doctor``."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from helpers.traces import load_spans, steps
from helpers.verl_runs import TOOL_HANG_S

from verl_otel import semconv as sc
from verl_otel.cli.main import main

pytestmark = pytest.mark.verl

SEARCH = "search"
OUTCOMES = set(sc.TOOL_OUTCOMES)


def _calls(spans: list) -> list:
    return [s for s in spans if s.name.startswith(sc.SPAN_TOOL_PREFIX + " ")]


def _planted_step(run) -> int:
    """The step whose search calls the plants made raise (the plants count steps as the LLM server answers)."""
    by_step = steps(load_spans(run.out / sc.TRACES_FILE))
    failed = {
        n
        for n, t in by_step.items()
        for c in _calls(t.spans)
        if c.attributes[sc.ATTR_GENAI_TOOL_NAME] == SEARCH and c.attributes[sc.ATTR_TOOL_OUTCOME] == sc.TOOL_RAISED
    }
    assert len(failed) == 1, failed
    return failed.pop()


def test_every_turn_and_tool_call_is_a_span_under_its_sample(colocate_async_run):
    run = colocate_async_run
    assert run.rc == 0, run.log_tail()
    by_step = steps(load_spans(run.out / sc.TRACES_FILE))
    planted = _planted_step(run)
    outcomes: Counter = Counter()
    for number in (1, 2):
        spans = by_step[number].spans
        by_id = {s.span_id: s for s in spans}
        samples = [s for s in spans if s.name == sc.SPAN_ROLLOUT_SAMPLE]
        turns = [s for s in spans if s.name == sc.SPAN_TURN]
        calls = _calls(spans)
        assert samples and turns and calls, (number, Counter(s.name for s in spans))
        assert all(by_id[t.parent_id].name == sc.SPAN_ROLLOUT_SAMPLE for t in turns)
        assert all(by_id[c.parent_id].name == sc.SPAN_TURN for c in calls)
        for sample in samples:  # the demo's stand-in answers over 3 turns, the first two with tool calls
            mine = [c for c in calls if by_id[by_id[c.parent_id].parent_id] is sample]
            assert sample.attributes[sc.ATTR_SAMPLE_TOOL_CALLS_MADE] == len(mine) == 2, (sample.attributes, len(mine))
            own = [t for t in turns if t.parent_id == sample.span_id]
            finish = [list(t.attributes.get(sc.ATTR_GENAI_FINISH_REASONS) or ()) for t in own]  # JSON: lists
            # every turn completes: a request the weight sync aborted is resumed by verl's client (v1 trainers
            # always resume), and the turn ends as the resumed request does
            assert len(own) == sample.attributes[sc.ATTR_SAMPLE_ASSISTANT_TURNS] == 3, (finish, sample.attributes)
            assert all(f == ["completed"] for f in finish), finish
        search = [c for c in calls if c.attributes[sc.ATTR_GENAI_TOOL_NAME] == SEARCH]
        raised = [c for c in search if c.attributes[sc.ATTR_TOOL_OUTCOME] == sc.TOOL_RAISED]
        if number == planted:  # every search call of the step raised, the backend's error type on each
            assert raised == search and {c.attributes[sc.ATTR_ERROR_TYPE] for c in raised} == {"ConnectionError"}
            hung = max(search, key=lambda c: c.end_ns - c.start_ns)
            assert (hung.end_ns - hung.start_ns) / 1e9 >= 0.9 * TOOL_HANG_S, hung
            holder = by_id[by_id[hung.parent_id].parent_id]
            assert holder.attributes[sc.ATTR_SAMPLE_TOOLS_S] >= 0.9 * TOOL_HANG_S, holder.attributes
        else:
            assert not raised, [c.attributes for c in raised]
        outcomes.update(c.attributes[sc.ATTR_TOOL_OUTCOME] for c in calls)
    assert set(outcomes) == OUTCOMES, outcomes


def test_prometheus_counts_every_call_by_tool_and_outcome(colocate_async_run):
    run = colocate_async_run
    assert run.query_time is not None, run.log_tail()
    # the most the run's agent-loop workers counted together (a worker's page goes with its process at the end),
    # up to now: colocate_async rolls out the next step's prompts, with their tool calls, after the last step's
    # end (the run's query time)
    total = f"sum by ({sc.LABEL_TOOL}, {sc.LABEL_OUTCOME}) ({sc.TOOL_CALL_SECONDS.name}_count)"
    rows = run.prom.query(f"max_over_time(({total})[15m:1s]) > 0", at=time.time())
    counted = {(r["metric"][sc.LABEL_TOOL], r["metric"][sc.LABEL_OUTCOME]): float(r["value"][1]) for r in rows}
    spanned = Counter(
        (c.attributes[sc.ATTR_GENAI_TOOL_NAME], c.attributes[sc.ATTR_TOOL_OUTCOME])
        for c in _calls(load_spans(run.out / sc.TRACES_FILE))
    )
    assert spanned, "no tool call span"
    # every call is counted; a sample beyond the span cap is counted and not spanned
    assert all(counted.get(key, 0) >= n for key, n in spanned.items()), (counted, spanned)
    assert {o for _, o in counted} == OUTCOMES, counted


def test_the_failing_search_backend_fires_its_alert_after_the_failures_began(colocate_async_run):
    run = colocate_async_run
    by_step = steps(load_spans(run.out / sc.TRACES_FILE))
    first_failure = min(
        c.start_ns / 1e9
        for c in _calls(by_step[_planted_step(run)].spans)
        if c.attributes[sc.ATTR_TOOL_OUTCOME] == sc.TOOL_RAISED
    )
    firing = run.prom.api(
        "query_range",
        query=f'ALERTS{{alertname="VerlToolFailing", alertstate="firing", {sc.LABEL_TOOL}="{SEARCH}"}}',
        start=first_failure - 300,
        end=run.query_time,
        step=1,
    )["result"]
    assert firing, "VerlToolFailing never fired for the search tool"
    times = [float(ts) for row in firing for ts, _ in row["values"]]
    assert min(times) >= first_failure, (first_failure, min(times))


def test_slow_steps_names_the_hung_tool_and_gives_per_tool_figures(colocate_async_run, capsys):
    run = colocate_async_run
    planted = _planted_step(run)
    file = str(run.out / sc.TRACES_FILE)
    assert main(["slow-steps", "--file", file, "--tools", "--json"]) == 0
    step = next(s for s in json.loads(capsys.readouterr().out) if s["global_step"] == planted)
    search = next(t for t in step["tools"] if t["tool"] == SEARCH)
    assert search["failures"] == search["calls"] > 0 and search["max_s"] >= 0.9 * TOOL_HANG_S, search
    assert main(["slow-steps", "--file", file, "--tools"]) == 0
    text = capsys.readouterr().out
    calls = search["calls"]
    assert f"tool {SEARCH}: {calls} calls, {calls} failed (100%)" in text, text


def test_doctor_names_the_hung_tool_call_and_the_frame_inside_the_tool(colocate_async_run, capsys):
    run = colocate_async_run
    assert main(["doctor", "--dir", str(run.out), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)["stalls"]
    tools = [r for r in records if r["phase"] == sc.SPAN_TOOL_PREFIX]
    assert tools, [(r["process_role"], r["phase"], r["frame"]) for r in records]
    assert all(r["call"].startswith(f"{sc.SPAN_TOOL_PREFIX} {SEARCH} (sample #") for r in tools), tools
    assert tools[0]["process_role"] == sc.PROCESS_ROLE_AGENT_LOOP, tools[0]
    assert main(["doctor", "--dir", str(run.out)]) == 0
    text = capsys.readouterr().out
    assert f"{sc.SPAN_TOOL_PREFIX} {SEARCH} (sample #" in text, text
