"""Paged Jaeger reading (analysis/jaeger_pages.py): against a local search that honours the window and the limit
as Jaeger does, its traces in the orders storages give them (v3 and legacy), and against the real Jaeger binary
(memory storage, the run's step traces sent to its OTLP port): every answer holds at most a page, and what the
readers make of the pages is what they make of one answer holding every trace."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from helpers.jaeger import FakeJaeger, Storage, many_steps, v3_body

from verl_otel import semconv as sc
from verl_otel.analysis import jaeger_pages, slow_steps
from verl_otel.analysis.jaeger import JaegerClient
from verl_otel.analysis.step_traces import build_steps
from verl_otel.analysis.val_generation_reader import generations, needed
from verl_otel.cli.main import main

WINDOW = (1_799_990_000 * 10**9, 1_800_100_000 * 10**9)  # many_steps' run is in it, with room on both sides
BENCH = Path(__file__).resolve().parent.parent / "bench"


def _ranking(steps: list) -> list:
    return slow_steps.to_json(slow_steps.rank(steps, 100), None)


@pytest.mark.parametrize("order", ["newest", "oldest", "shuffled"])
@pytest.mark.parametrize("api", ["v3", "legacy"])
def test_pages_are_bounded_and_read_what_one_answer_reads(order, api):
    spans = many_steps(60, slow_step=41)
    storage = Storage(spans, order)
    j = FakeJaeger({"/api/v3/traces": storage.v3} if api == "v3" else {"/api/traces": storage.legacy})
    try:
        pages = jaeger_pages.Pages()
        client = JaegerClient(j.url)
        got = jaeger_pages.steps(
            client, "verl", *WINDOW, [sc.SPAN_STEP], slow_steps.SAMPLES_SHOWN, pages, page_traces=4
        )
    finally:
        j.close()
    assert pages.traces == 60 and pages.crowded == 0 and max(storage.answers) <= 4
    assert len(storage.answers) >= 15 and pages.answers == len(storage.answers)
    one = max(len(v3_body(t)) for t in storage.traces.values())
    assert api == "legacy" or pages.largest_bytes <= 4 * one
    # a full answer is asked again, never taken: what is read once is at most a small part of the run
    assert pages.asked_again <= 45, pages
    assert _ranking(got) == _ranking(build_steps([s for t in _all(spans, api) for s in t]))
    assert _ranking(got)[0]["global_step"] == 41


def _all(spans: list, api: str) -> list:
    """Every trace read in one answer (the unpaged reading) through the same API."""
    storage = Storage(spans)
    j = FakeJaeger({"/api/v3/traces": storage.v3} if api == "v3" else {"/api/traces": storage.legacy})
    try:
        return [JaegerClient(j.url).find_steps("verl", *WINDOW, limit=10_000)]
    finally:
        j.close()


def test_a_microsecond_holding_more_than_a_page_is_taken_and_counted():
    spans = many_steps(6, slow_step=2)
    for s in spans:  # every step starts at the same microsecond
        if s["name"] == sc.SPAN_STEP:
            s["startTimeUnixNano"] = str(1_800_000_000 * 10**9)
    storage = Storage(spans, "shuffled")
    j = FakeJaeger({"/api/v3/traces": storage.v3})
    try:
        pages = jaeger_pages.Pages()
        walked = list(jaeger_pages.walk(JaegerClient(j.url), "verl", *WINDOW, sc.SPAN_STEP, page_traces=3, stats=pages))
    finally:
        j.close()
    assert pages.crowded == 1 and pages.traces == 3 and max(storage.answers) <= 3
    assert len({s.trace_id for page in walked for s in page}) == 3 and len(storage.answers) < 200


def test_a_server_that_ignores_the_window_is_read_in_one_answer():
    j = FakeJaeger({"/api/v3/traces": (200, v3_body(many_steps(30, slow_step=3)))})
    try:
        pages = jaeger_pages.Pages()
        got = jaeger_pages.steps(JaegerClient(j.url), "verl", *WINDOW, [sc.SPAN_STEP], 3, pages)
    finally:
        j.close()
    assert len(got) == 30 and pages.answers == 1 and len(j.queries) == 1


# -- the real Jaeger ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_jaeger():
    from helpers.real_stack import go_binaries

    sys.path.insert(0, str(BENCH))
    import scale_jaeger

    jaeger = scale_jaeger.MemoryJaeger(go_binaries()["jaeger"])
    try:
        scale_jaeger.load_run(jaeger, 20, workers=6, samples=4, replicas=2)
        yield jaeger
    finally:
        jaeger.stop()


def test_real_jaeger_paged_validations_and_cli_read_what_one_answer_reads(real_jaeger, capsys):
    client, now = JaegerClient(real_jaeger.url), time.time_ns()
    since = now - 2 * 86400 * 10**9
    every = client.find_traces("verl", since, now, sc.PHASE_VALIDATE, limit=1000)
    expected = generations(every)
    assert len(expected) == 2 * 64  # steps 10 and 20 validate
    pages, seen, kept = jaeger_pages.Pages(), set[str](), []
    for page in jaeger_pages.walk(client, "verl", since, now, sc.PHASE_VALIDATE, page_traces=2, seen=seen, stats=pages):
        assert len({s.trace_id for s in page}) <= 2
        kept += [k for k in map(needed, page) if k is not None]
    assert generations(kept) == expected and pages.traces == 2
    # the commands, with their own page size
    assert main(["val-generations", "--jaeger", real_jaeger.url, "--since", "2d", "--json"]) == 0
    assert [g["step"] for g in json.loads(capsys.readouterr().out)] == [g.step for g in expected]
    assert main(["slow-steps", "--jaeger", real_jaeger.url, "--since", "2d", "--json", "--top", "20"]) == 0
    unpaged = slow_steps.to_json(
        slow_steps.rank(build_steps(client.find_steps("verl", since, now, limit=1000)), 20), real_jaeger.url
    )
    assert json.loads(capsys.readouterr().out) == unpaged and len(unpaged) == 20
