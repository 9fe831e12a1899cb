"""``verl-otel timeline`` on a synthetic step trace (tests/helpers/timeline_spans.py): the lanes each process gets,
the samples drawn and counted, the idle stretches by bucket, the step span's GPU-time buckets when it has them,
a bounded page at production size; and the page in a real headless Chromium: no console line, its script ran,
a screenshot shows the lanes. The shared v1 run's page: tests/test_e2e_timeline.py."""

from __future__ import annotations

import json

import pytest

from helpers import timeline_spans as syn
from helpers.browser_page import colours, hex_rgb, open_page
from helpers.jaeger import FakeJaeger

from verl_otel import semconv as sc
from verl_otel.analysis import timeline as tlm
from verl_otel.analysis.otlp_json import read_file
from verl_otel.cli import timeline_page
from verl_otel.cli.main import main


def _built(tmp_path, **kw):
    path = syn.write(tmp_path / "traces.jsonl", **kw)
    tl = tlm.build(read_file(path).spans, 5)
    assert tl is not None
    return tl


def _lane(tl, label):
    return next(lane for lane in tl.lanes if lane.label.startswith(label))


def test_a_lane_per_rank_replica_and_agent_loop_worker(tmp_path):
    tl = _built(tmp_path)
    labels = [lane.label for lane in tl.lanes]
    assert [lane.group for lane in tl.lanes] == [tlm.GROUP_RANK] * 2 + [tlm.GROUP_REPLICA] * 2 + [
        tlm.GROUP_AGENT
    ] * 3 + [tlm.GROUP_OTHER]
    assert labels[:2] == ["rank 0 (node-a pid 200)", "rank 1 (node-a pid 201)"]  # rank 1 named by its later span
    assert labels[2:4] == ["replica 0 (node-a pid 400)", "replica worker 1 (node-a pid 401)"]
    assert [b.name for b in tl.driver.bars] == ["rollout", "old_log_prob", "update_actor", "update_weights"]
    assert len(_lane(tl, "replica 0").bars) == 5  # its five requests
    assert [b.name for b in _lane(tl, "rank 1").bars] == [
        "worker.compute_log_prob",
        "worker.update_actor",
        sc.SPAN_WEIGHT_SYNC,
    ]


def test_the_slowest_samples_are_drawn_and_the_rest_counted(tmp_path):
    tl = _built(tmp_path)
    assert tl.samples_total == sum(syn.SAMPLES_PER_WORKER)
    assert tl.samples_drawn == tlm.SAMPLES_DRAWN
    drawn = sorted((b.seconds for lane in tl.lanes for b in lane.samples), reverse=True)
    spans = read_file(tmp_path / "traces.jsonl").spans
    every = sorted((s.seconds for s in spans if s.name == sc.SPAN_ROLLOUT_SAMPLE), reverse=True)
    assert drawn == pytest.approx(every[: tlm.SAMPLES_DRAWN])  # the slowest, none left out for a faster one
    counted = sum(lane.samples_not_drawn + len(lane.samples) for lane in tl.lanes)
    assert counted == tl.samples_total  # drawn + counted = what the workers say they ran
    assert _lane(tl, "agent-loop worker 0").samples_not_drawn >= syn.SAMPLES_PER_WORKER[0] - syn.SPANNED[0]


def test_idle_stretches_by_bucket_derived_without_the_accounting(tmp_path):
    tl = _built(tmp_path)
    assert not tl.measured and tl.gpu_seconds is None
    (gap,) = tl.driver.idle[:1]  # between rollout (ends at 4 s) and old_log_prob (starts at 4.5 s)
    assert gap.name == tlm.BUCKET_IDLE and gap.seconds == pytest.approx(0.5)
    tail = [b for b in _lane(tl, "agent-loop worker 2").idle if b.name == tlm.BUCKET_LONG_TAIL]
    assert [round(b.seconds, 3) for b in tail] == [2.0]  # done at 2 s of a rollout that ran to 4 s
    idle_replica = _lane(tl, "replica worker 1")
    assert [b.name for b in idle_replica.idle] == [tlm.BUCKET_WAITING]  # never got a request: the whole rollout
    assert idle_replica.idle[0].seconds == pytest.approx(4.0)
    assert tl.buckets[tlm.BUCKET_LONG_TAIL] > 0 and tl.buckets[tlm.BUCKET_IDLE] == pytest.approx(0.5 + 0.7)


def test_the_step_spans_buckets_are_shown_when_the_run_measured_them(tmp_path):
    tl = _built(tmp_path, goodput=True)
    assert tl.measured and tl.buckets == syn.GOODPUT
    assert next(iter(tl.buckets)) == "generating"  # largest first
    assert tl.gpu_seconds == pytest.approx(sum(syn.GOODPUT.values()))
    page = timeline_page.render(tl, "x")
    assert "measured in-process" in page and "GPU-s" in page
    derived = timeline_page.render(_built(tmp_path), "x")
    assert "derived here from the spans" in derived and "lane-s" in derived
    assert not tl.busy and "measured busy" not in page  # no NVML readings: no column


def test_the_buckets_measured_busy_share_is_a_column_where_measured(tmp_path):
    tl = _built(tmp_path, goodput=True, busy={"update_actor": 0.41, "generating": 0.8, "long_tail": 0.8})
    assert tl.busy == {"update_actor": 0.41, "generating": 0.8, "long_tail": 0.8}
    page = timeline_page.render(tl, "x")
    assert "<th>measured busy</th>" in page
    rows = {r.split('"', 1)[0]: r.split("</tr>", 1)[0] for r in page.split('<tr class="bucket" data-bucket="')[1:]}
    assert rows["update_actor"].endswith("<td>41%</td>"), rows
    assert rows["idle"].endswith("<td></td>"), rows  # not measured: empty, not 0%


def test_page_escapes_what_the_trace_says(tmp_path):
    page = timeline_page.render(_built(tmp_path), "<file>")
    assert syn.MARKUP_ROLE not in page and "&lt;b&gt;evil&lt;/b&gt;&amp;role" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched
    assert "src=" not in page and "<link" not in page


def test_bounded_at_production_size(tmp_path, monkeypatch):
    """32k samples of one worker and 600 ranks: the page draws the bounded number and counts the rest."""
    monkeypatch.setattr(syn, "SAMPLES_PER_WORKER", (32_000, 40, 12))
    monkeypatch.setattr(syn, "SPANNED", (2_000, 40, 12))
    monkeypatch.setattr(tlm, "LANES_PER_GROUP", 2)
    tl = _built(tmp_path)
    assert tl.samples_total == 32_052 and tl.samples_drawn == tlm.SAMPLES_DRAWN
    assert tl.lanes_not_drawn == {tlm.GROUP_AGENT: 1}
    page = timeline_page.render(tl, "x")
    assert page.count('class="sample"') == tlm.SAMPLES_DRAWN
    assert "+1 agent-loop worker lanes not drawn" in page
    assert len(page) < 400_000


def test_cli_writes_the_page_and_names_missing_steps(tmp_path, capsys, monkeypatch):
    path = syn.write(tmp_path / "traces.jsonl")
    out = tmp_path / "s.html"
    assert main(["timeline", "--dir", str(tmp_path), "--step", "5", "-o", str(out)]) == 0
    assert "8 lanes" in capsys.readouterr().out and out.read_text().startswith("<!DOCTYPE html>")
    assert main(["timeline", "--file", str(path), "--step", "9", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no trace of step 9" in err and "steps found: 5" in err
    monkeypatch.setattr("verl_otel.cli.browser.find", lambda: None)
    assert main(["timeline", "--file", str(path), "--step", "5", "-o", str(out), "--png", str(tmp_path / "p.png")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no headless Chromium found" in err[0]


# -- the page in a real headless Chromium ------------------------------------------------------------------------
@pytest.mark.integration
def test_page_renders_in_chromium_without_a_console_line(tmp_path):
    out = tmp_path / "s.html"
    syn.write(tmp_path / "traces.jsonl", goodput=True)
    assert main(["timeline", "--dir", str(tmp_path), "--step", "5", "-o", str(out)]) == 0
    dom, console = open_page(out)
    assert console == []
    assert 'data-ready="9"' in dom  # its script ran to its end: the driver's lane and 8 process lanes


@pytest.mark.integration
def test_the_console_check_fails_on_a_script_error(tmp_path):
    """The check above can fail: a page whose script throws shows the exception in the console lines."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>document.body.dataset.x = nothing.here;</script></body></html>")
    _, console = open_page(bad)
    assert any("Uncaught ReferenceError" in line for line in console), console


@pytest.mark.integration
def test_png_shows_the_lanes(tmp_path):
    syn.write(tmp_path / "traces.jsonl")
    png = tmp_path / "s.png"
    html = str(tmp_path / "s.html")
    assert main(["timeline", "--dir", str(tmp_path), "--step", "5", "-o", html, "--png", str(png)]) == 0
    seen = colours(png)
    phase_px = {p: seen[hex_rgb(timeline_page.color(p))] for p in ("rollout", "update_actor", "old_log_prob")}
    assert all(n > 500 for n in phase_px.values()), phase_px  # the driver's bars and the ranks' calls
    assert seen[hex_rgb(timeline_page.SAMPLE_COLOR)] > 1000  # the samples on the agent-loop workers' lanes
    assert sum(seen.values()) - seen[(255, 255, 255)] > 50_000  # a picture, not a blank page


def test_from_jaeger(tmp_path, capsys):
    """--jaeger: the step found by a search of step traces, then its trace read whole (a local Jaeger query
    service answering in Jaeger's v3 shape: tests/helpers/jaeger.py)."""
    lines = syn.write(tmp_path / "traces.jsonl").read_text().splitlines()
    body = json.dumps({"result": {"resourceSpans": [json.loads(x)["resourceSpans"][0] for x in lines]}}).encode()
    jaeger = FakeJaeger({"/api/v3/traces": (200, body), "/api/v3/traces/": (200, body)})
    try:
        out = tmp_path / "j.html"
        args = ["timeline", "--jaeger", jaeger.url, "--since", "4000d", "--step", "5", "-o", str(out)]
        assert main(args) == 0, capsys.readouterr().err
        assert "8 lanes" in capsys.readouterr().out
        assert f"/api/v3/traces/{syn.TRACE}" in jaeger.paths  # the trace read by its id
        assert "Jaeger at" in out.read_text()
        assert main([*args[:-4], "--step", "6", "-o", str(out)]) == 2
        assert "no trace of step 6" in capsys.readouterr().err
    finally:
        jaeger.close()
