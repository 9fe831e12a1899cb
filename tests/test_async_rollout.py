"""fully_async's rollouter and trainer, driven through verl's real methods (tests/drive_async.py) with a
real MessageQueue actor on a real local Ray: one rollouter span per parameter version, step spans linked
to the windows whose samples they trained on, staleness / idle / queue gauges matching what verl computes,
and both sides' console lines. Batches and actor classes on their own: tests/test_async_batches.py."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from helpers.procs import clean_env, run_py
from helpers.traces import event_names, load_spans

from verl_otel import semconv as sc
from verl_otel.analysis.step_traces import Span

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("drive-async")
    proc = run_py(
        [str(HERE / "drive_async.py"), str(out / "record.json")],
        clean_env(VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(out)),
        out,
        timeout=240,
    )
    assert proc.returncode == 0 and "DRIVE_ASYNC_DONE" in proc.stdout, (proc.stdout[-3000:], proc.stderr[-3000:])
    record = json.loads((out / "record.json").read_text())
    assert record["errors"] == [], record["errors"]
    record["stdout"] = proc.stdout
    return record, load_spans(out / "traces.jsonl")


def _windows(spans: list[Span]) -> dict[int, Span]:
    wins = [s for s in spans if s.name == sc.SPAN_ROLLOUTER_GENERATE]
    by_version = {s.attributes[sc.ATTR_PARAM_VERSION]: s for s in wins}
    assert len(by_version) == len(wins), "one rollouter.generate span per parameter version"
    return by_version


def test_rollouter_has_one_window_span_per_parameter_version(run):
    record, spans = run
    windows = _windows(spans)
    syncs = [s["version"] for s in record["syncs"]]
    # the sync before fit() opens version 0; every later sync closes a window and opens the next
    assert sorted(windows) == syncs == list(range(len(syncs)))
    for span in windows.values():
        assert not span.parent_id and span.resource[sc.RES_PROCESS_ROLE] == sc.PROCESS_ROLE_ROLLOUTER
    assert sum(s.attributes.get(sc.ATTR_ASYNC_SAMPLES, 0) for s in windows.values()) == record["produced"] == 8
    assert len({s.trace_id for s in windows.values()}) == len(windows)


def test_step_links_lead_to_the_windows_that_fed_it(run):
    record, spans = run
    windows = _windows(spans)
    steps = {s.attributes[sc.ATTR_GLOBAL_STEP]: s for s in spans if s.name == sc.SPAN_STEP}
    assert record["steps"], "the trainer took no batch"
    for taken in record["steps"]:
        step = steps[taken["global_step"]]
        links = step.links
        # each sample's window = the weights version its generation started with (verl's min_global_steps)
        assert Counter(
            {ln.attributes[sc.ATTR_PARAM_VERSION]: ln.attributes[sc.ATTR_ASYNC_SAMPLES] for ln in links}
        ) == Counter(taken["start_versions"]), (taken, links)
        for ln in links:
            window = windows[ln.attributes[sc.ATTR_PARAM_VERSION]]
            assert (ln.trace_id, ln.span_id) == (window.trace_id, window.span_id)
            assert ln.attributes[sc.ATTR_STALENESS] == taken["param_version"] - ln.attributes[sc.ATTR_PARAM_VERSION]
    assert any(ln.attributes[sc.ATTR_STALENESS] > 0 for s in steps.values() for ln in s.links), (
        "the scenario must train on stale samples for the staleness checks to mean anything"
    )


def test_staleness_and_version_gauges_match_the_batches(run):
    record, _ = run
    for taken in record["steps"]:
        g = taken["gauges"]
        stale = [taken["param_version"] - v for v in taken["end_versions"]]
        assert g[sc.ASYNC_STALENESS.name] == max(stale)
        assert g[sc.ASYNC_STALENESS_MEAN.name] == pytest.approx(sum(stale) / len(stale))
        assert g[f"{sc.ASYNC_PARAM_VERSION.name}{{trainer}}"] == taken["param_version"]
        assert g[f"{sc.ASYNC_PARAM_VERSION.name}{{rollouter}}"] == taken["param_version"]
        assert 0 <= g[f"{sc.ASYNC_QUEUE_DEPTH.name}{{trainer}}"] <= g[sc.ASYNC_QUEUE_CAPACITY.name]
    final = record["final_gauges"]
    assert final[sc.ASYNC_SAMPLES_PRODUCED.name] == record["produced"]
    assert final[sc.ASYNC_SAMPLES_DROPPED.name] == 0


def test_gauges_on_the_metrics_page(run):
    """The same values through the real exporter: this process' /metrics page, found via the file_sd targets."""
    record, _ = run
    page = {}
    for line in record["exposition"].splitlines():
        if line.startswith("verl_async_"):
            series, value = line.rsplit(" ", 1)
            page[series] = float(value)

    def value(name: str, **labels: str) -> float:
        (v,) = [
            v
            for s, v in page.items()
            if s.split("{")[0] == name and all(f'{k}="{lv}"' in s for k, lv in labels.items())
        ]
        return v

    assert value(sc.ASYNC_SAMPLES_PRODUCED.name) == record["produced"]
    assert value(sc.ASYNC_PARAM_VERSION.name, side=sc.PROCESS_ROLE_ROLLOUTER) == record["syncs"][-1]["version"]
    assert value(sc.ASYNC_PARAM_VERSION.name, side=sc.PROCESS_ROLE_TRAINER) == record["syncs"][-1]["version"]
    assert value(sc.ASYNC_QUEUE_CAPACITY.name) == 4
    assert value(sc.ASYNC_STALENESS.name) == record["final_gauges"][sc.ASYNC_STALENESS.name]
    # Prometheus adds the process' labels from the targets file: the rollouter's wiring named the run and role
    labels = record["target_labels"]
    assert labels[sc.LABEL_EXPERIMENT] == "exp" and labels[sc.LABEL_PROCESS_ROLE] == sc.PROCESS_ROLE_ROLLOUTER, labels


def test_async_panels_show_the_run_in_real_prometheus(run, prom_factory):
    """The dashboard's fully_async panels, as Grafana sends them, on a real Prometheus scraping the rollouter
    process' real /metrics page (as served at the run's end, with its file_sd labels): every query has data."""
    from helpers.prom import MetricsEndpoint

    from verl_otel.dashboards import all_expressions, concrete
    from verl_otel.dashboards.async_panels import _ASYNC_ONLY

    record, _ = run
    exprs = [(where, expr) for where, expr, why in all_expressions() if why == _ASYNC_ONLY]
    assert len(exprs) >= 9, exprs
    with MetricsEndpoint(record["exposition"]) as endpoint:
        prom = prom_factory(
            config={
                "global": {"scrape_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "verl",
                        "static_configs": [{"targets": [endpoint.address], "labels": record["target_labels"]}],
                    }
                ],
            }
        )
        prom.wait_for(f"count_over_time({sc.ASYNC_SAMPLES_PRODUCED.name}[1m]) >= 2")  # rate() needs two points
        empty = [where for where, expr in exprs if not prom.query(concrete(expr))]
    assert empty == []


def test_idle_ratios(run):
    record, _ = run
    # rollouter: the live gauge just before a sync is verl's own idle_ratio of that window
    compared = [
        (s["gauges_before"][f"{sc.ASYNC_IDLE_RATIO.name}{{rollouter}}"], s["verl_idle"]) for s in record["syncs"][1:]
    ]
    assert any(verl > 0.2 for _, verl in compared), compared
    for live, verl in compared:
        assert live == pytest.approx(verl, abs=0.05), compared
    # trainer: the first step waited for the rollouter's first samples, so its window was partly idle
    first = record["steps"][0]["gauges"][f"{sc.ASYNC_IDLE_RATIO.name}{{trainer}}"]
    assert 0.05 < first <= 1.0, first
    # the rollouter ran ahead by the staleness limit and paused: idle until the sync
    paused = [s["gauges_before"][sc.ASYNC_ROLLOUTER_PAUSED.name] for s in record["syncs"][1:]]
    assert [p for p, (_, verl) in zip(paused, compared, strict=True) if verl > 0] == [1.0] * sum(
        v > 0 for _, v in compared
    )


def test_rollouter_validation_span(run):
    record, spans = run
    vals = sorted(
        (s for s in spans if s.name == sc.SPAN_ROLLOUTER_VALIDATE), key=lambda s: s.attributes[sc.ATTR_PARAM_VERSION]
    )
    # before training, then every test_freq=2 versions as the trainer asks
    assert [s.attributes[sc.ATTR_PARAM_VERSION] for s in vals] == [0, 2, 4]
    assert all(not s.parent_id and s.resource[sc.RES_PROCESS_ROLE] == sc.PROCESS_ROLE_ROLLOUTER for s in vals)
    # the generations verl picks for log_val_generations (seed 001's gap) are events on that span, not elsewhere
    for span in vals:
        assert span.attributes[sc.ATTR_VAL_GENERATIONS] == 2
        assert event_names(span) == [sc.EVENT_VAL_GENERATION] * 2
    # (the drive runs both sides in one process: the trainer's validate phases are there too, inside steps)
    assert not [s for s in spans if s.name == sc.PHASE_VALIDATE and not s.parent_id]
    assert record["validate"]["val-core/score/mean"] == 1.0  # verl's result passes through unchanged


def test_rollouter_samples_are_spans_of_their_window(run):
    """Each prompt group the rollouter generated (here all 8: fewer than VERL_OTEL_SAMPLE_SPANS per window)
    is a rollout.sample span under the window it started in, with verl's versions and timings."""
    _, spans = run
    windows = {s.span_id: s for s in _windows(spans).values()}
    samples = [s for s in spans if s.name == sc.SPAN_ROLLOUT_SAMPLE]
    assert len(samples) == 8 and len({s.attributes[sc.ATTR_SAMPLE_ID] for s in samples}) == 8
    for sample in samples:
        window = windows[sample.parent_id]
        attrs = sample.attributes
        assert sample.trace_id == window.trace_id and sample.resource[sc.RES_PROCESS_ROLE] == sc.PROCESS_ROLE_ROLLOUTER
        assert (
            attrs[sc.ATTR_PARAM_VERSION] == window.attributes[sc.ATTR_PARAM_VERSION] <= attrs[sc.ATTR_PARAM_VERSION_END]
        )
        assert attrs[sc.ATTR_SAMPLES] == 2 and attrs[sc.ATTR_SAMPLE_RESPONSE_TOKENS] == 2
        assert attrs[sc.SAMPLE_TIMING_ATTRS["generate_sequences"]] == 0.05
        assert sample.end_ns - sample.start_ns >= 50_000_000


def _children(spans: list[Span], parent: Span) -> dict[str, Span]:
    return {s.name: s for s in spans if s.parent_id == parent.span_id and s.trace_id == parent.trace_id}


def test_each_fit_step_is_one_trace_with_its_validation(run):
    """verl logs inside fully_async's step timer and validates after it: the trace still spans the
    whole fit_step, one per step, with the validation the trainer asked for as its ``validate`` phase."""
    record, spans = run
    steps = [s for s in spans if s.name == sc.SPAN_STEP and not s.attributes.get(sc.ATTR_STOPPED)]
    numbers = [s.attributes[sc.ATTR_GLOBAL_STEP] for s in steps]
    assert sorted(numbers) == [t["global_step"] for t in record["steps"]] == [1, 2, 3, 4]
    for step in steps:
        kids = _children(spans, step)
        assert {sc.PHASE_ROLLOUT, sc.PHASE_UPDATE_ACTOR, "param_sync"} <= set(kids), kids.keys()
        version = step.attributes[sc.ATTR_GLOBAL_STEP]  # one step per version here (trigger_parameter_sync_step=1)
        if version % 2 == 0:
            val = kids[sc.PHASE_VALIDATE]
            assert step.start_ns <= val.start_ns
            assert val.end_ns <= step.end_ns
            assert val.start_ns >= kids["param_sync"].end_ns
        else:
            assert sc.PHASE_VALIDATE not in kids
        assert not step.status_error


def test_queue_end_is_a_stop_not_an_error(run):
    """fully_async ends by raising TrainingStopException inside the last fit_step's ``gen`` timer."""
    _, spans = run
    (stopped,) = [s for s in spans if s.name == sc.SPAN_STEP and s.attributes.get(sc.ATTR_STOPPED)]
    assert stopped.attributes[sc.ATTR_GLOBAL_STEP] == 5
    gen = _children(spans, stopped)[sc.PHASE_ROLLOUT]
    assert gen.attributes[sc.ATTR_STOPPED] is True
    assert not [s for s in spans if s.status_error]


def test_console_lines_of_an_async_run(run):
    """Both sides' console lines: the trainer's step line notes the weights version and the batch's staleness
    (the versions recorded by the drive); the rollouter prints one line per parameter-version window."""
    import re

    record, _ = run
    lines = record["stdout"].splitlines()
    steps = {
        int(m[1]): m
        for m in (
            re.match(
                r"\[verl-otel\] step (\d+)\S* took .* \| param version (\d+), "
                r"staleness max (\d+) mean ([\d.]+)$",
                ln,
            )
            for ln in lines
        )
        if m
    }
    assert sorted(steps) == [t["global_step"] for t in record["steps"]]
    for taken in record["steps"]:
        m = steps[taken["global_step"]]
        stale = [taken["param_version"] - v for v in taken["start_versions"]]
        assert int(m[2]) == taken["param_version"] + 1  # after this step's parameter sync
        assert (int(m[3]), float(m[4])) == (max(stale), round(sum(stale) / len(stale), 2))
    windows = [
        ln
        for ln in lines
        if re.match(
            r"\[verl-otel\] rollouter param version \d+: \d+ samples queued, "
            r"\d+ dropped, idle \d+%$",
            ln,
        )
    ]
    assert len(windows) == len(record["syncs"]) - 1  # every sync after the first closes a window
