"""``verl-otel timeline`` on the shared v1 run (tests/conftest.py ``v1_run``: step 3 has a slow sample,
``rollout_sample@3=2``, and a slow ``update_actor@3=3``): its lanes from the real processes, the planted sample the
slowest one drawn, the long tail it caused shaded, the page in a real headless Chromium with no console line and
a screenshot showing the lanes; and the dashboard's "Phase per process" state timeline over the run's real
Prometheus. Synthetic edge cases: tests/test_timeline.py."""

from __future__ import annotations

import pytest

from helpers.browser_page import colours, hex_rgb, open_page

from verl_otel import semconv as sc
from verl_otel.analysis import timeline as tlm
from verl_otel.analysis.otlp_json import read_file
from verl_otel.cli import timeline_page
from verl_otel.cli.main import main
from verl_otel.dashboards import grafana, timeline_panels

pytestmark = pytest.mark.verl


@pytest.fixture(scope="module")
def step3(v1_run):
    assert v1_run.rc == 0, v1_run.log_tail()
    tl = tlm.build(read_file(v1_run.out / sc.TRACES_FILE).spans, v1_run.slow_step("rollout_sample"))
    assert tl is not None
    return tl


def test_lanes_of_the_real_processes(step3):
    groups = [lane.group for lane in step3.lanes]
    labels = [lane.label for lane in step3.lanes]
    assert groups.count(tlm.GROUP_RANK) >= 1 and groups.count(tlm.GROUP_AGENT) == 2, labels
    assert all(" pid " in lane.label for lane in step3.lanes)  # each lane is one process, named by host and pid
    ranks = [lane for lane in step3.lanes if lane.group == tlm.GROUP_RANK]
    assert ranks[0].label.startswith("rank 0 ")
    assert any(b.name == "worker.update_actor" for b in ranks[0].bars)
    phases = {b.name: b for b in step3.driver.bars}
    assert {sc.PHASE_ROLLOUT, sc.PHASE_OLD_LOG_PROB, sc.PHASE_UPDATE_ACTOR} <= set(phases)
    assert phases[sc.PHASE_UPDATE_ACTOR].seconds >= 3.0  # the planted update_actor@3=3
    # the step span's GPU-time buckets, measured in-process (telemetry/goodput.py), are the page's totals
    assert step3.measured and step3.gpu_seconds and step3.gpu_seconds > 0
    assert sum(step3.buckets.values()) == pytest.approx(step3.gpu_seconds, rel=0.01)


def test_the_planted_sample_is_drawn_and_its_long_tail_shaded(step3):
    agents = [lane for lane in step3.lanes if lane.group == tlm.GROUP_AGENT]
    slowest = max((b for lane in agents for b in lane.samples), key=lambda b: b.seconds)
    assert slowest.seconds >= 2.0  # rollout_sample@3=2
    assert step3.samples_drawn == step3.samples_total > 0  # a small step: every sample drawn
    other = next(lane for lane in agents if slowest not in lane.samples)
    tail = sum(b.seconds for b in other.idle if b.name == tlm.BUCKET_LONG_TAIL)
    assert tail >= 1.5, other.idle  # the other worker waited for the planted sample's worker
    assert step3.buckets[sc.BUCKET_LONG_TAIL] > 0  # measured (GPU-seconds of the rollout pool), not lane-seconds


def test_page_and_png_in_chromium(v1_run, step3, tmp_path):
    page, png = tmp_path / "step3.html", tmp_path / "step3.png"
    args = ["timeline", "--dir", str(v1_run.out), "--step", str(step3.step), "-o", str(page), "--png", str(png)]
    assert main(args) == 0
    dom, console = open_page(page)
    assert console == []
    assert f'data-ready="{1 + len(step3.lanes)}"' in dom  # the script ran to its end over every lane
    seen = colours(png)
    for colour in (timeline_page.color(sc.PHASE_ROLLOUT), timeline_page.color(sc.PHASE_UPDATE_ACTOR)):
        assert seen[hex_rgb(colour)] > 1000, colour  # the driver's phase bars
    assert seen[hex_rgb(timeline_page.SAMPLE_COLOR)] > 300  # the samples on their lanes


def test_phase_per_process_panel_over_the_run(v1_run):
    """The state timeline's query over the run's real Prometheus: one row per process; the trainer's row takes
    the rollout and update_actor states, an agent-loop worker's the rollout state (the planted slow sample keeps
    one in flight for 2 s), and every row is between phases at the end. The CPU demo's mini-batches take
    milliseconds, too short for a scrape: a training worker's update state is tested in
    tests/test_phase_timeline_panel.py."""
    prom, end = v1_run.prom, v1_run.query_time
    assert end is not None, v1_run.log_tail()
    expr = timeline_panels.phase_per_process()
    for var, value in grafana.ALL_VALUES.items():
        expr = expr.replace(var, value)
    start = min(v1_run.extra["step_times"].values()) - 5
    rows = prom.api("query_range", query=expr, start=start, end=end, step="0.5")["result"]
    states: dict[str, set[str]] = {}
    text = {str(v): t for v, t, _ in timeline_panels.PHASE_VALUES}
    for row in rows:
        role = row["metric"][sc.LABEL_PROCESS_ROLE]
        states.setdefault(role, set()).update(text[str(int(float(v)))] for _, v in row["values"])
    assert {sc.PHASE_ROLLOUT, sc.PHASE_UPDATE_ACTOR, timeline_panels.IDLE_TEXT} <= states[sc.PROCESS_ROLE_TRAINER], (
        states
    )
    assert sc.PHASE_ROLLOUT in states[sc.PROCESS_ROLE_AGENT_LOOP], states
    assert {sc.PROCESS_ROLE_WORKER, sc.PROCESS_ROLE_REWARD} <= set(states), states  # a row for every process
    last = {row["metric"]["instance"]: row["values"][-1][1] for row in rows}
    assert set(last.values()) == {"0"}, last  # the run settled: every process between phases
