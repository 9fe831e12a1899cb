"""`verl-otel goodput` on step traces whose spans carry the goodput split (made by the real accounting,
telemetry/goodput.py): from a trace file, a local Jaeger and a real Prometheus scraping verl-otel's own /metrics;
text and --json, the worst step named with the bucket that grew, advice tied to the lost buckets, and the
one-line failures."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import pytest

from helpers.jaeger import FakeJaeger, _attr, many_steps, v3_body

from verl_otel import semconv as sc
from verl_otel.cli import goodput as cli
from verl_otel.export.prometheus import serve
from verl_otel.process.metrics import MetricStore
from verl_otel.telemetry.goodput import account, busy_of, pools_of

TAIL_STEP, N = 5, 8


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="verl-otel")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return cli.run(parser.parse_args(["goodput", *argv]))


def _with_goodput(spans: list[dict[str, Any]], gpu_busy: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """Each step span gets the split of its phases on 4 GPUs; the rollout of TAIL_STEP waits for a long tail
    (its replicas busy a fifth of it), the others are busy 90% of theirs; ``gpu_busy``: the phases' measured busy
    share joined in (NVML), none without. Times shifted to an hour ago."""
    _shift(spans)
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        by_trace.setdefault(s["traceId"], []).append(s)
    for trace in by_trace.values():
        root = next(s for s in trace if s["name"] == sc.SPAN_STEP)
        step = next(a["value"]["intValue"] for a in root["attributes"] if a["key"] == sc.ATTR_GLOBAL_STEP)
        t = [(p["name"], int(p["startTimeUnixNano"]) / 1e9, int(p["endTimeUnixNano"]) / 1e9) for p in trace]
        phases = [x for x, p in zip(t, trace, strict=True) if any(a["key"] == sc.ATTR_PHASE for a in p["attributes"])]
        rollout = next(e - s for n, s, e in phases if n == sc.PHASE_ROLLOUT)
        busy = rollout * (0.2 if int(step) == TAIL_STEP else 0.9)
        start, end = int(root["startTimeUnixNano"]) / 1e9, int(root["endTimeUnixNano"]) / 1e9
        split = account(start, end, phases, pools_of(4, None), busy)
        split.busy = busy_of(split, gpu_busy)
        root["attributes"] += [_attr(k, v) for k, v in split.attributes().items()]
    return spans


@pytest.fixture
def traces() -> list[dict[str, Any]]:
    return _with_goodput(many_steps(N, slow_step=2))


def _check_json(out: str, traces: list[dict[str, Any]]) -> None:
    got = json.loads(out)
    assert [s["step"] for s in got["steps"]] == list(range(1, N + 1))
    for row in got["steps"]:
        assert sum(row["buckets"].values()) == pytest.approx(row["gpu_seconds"])
        assert "busy_share" not in row  # no NVML readings: absent, not 0
    assert "busy_share" not in got and all("busy_share" not in a for a in got["advice"])
    assert got["gpu_seconds"] == pytest.approx(sum(r["gpu_seconds"] for r in got["steps"]))
    assert got["worst_steps"][0] == TAIL_STEP
    assert got["advice"][0]["bucket"] == sc.BUCKET_LONG_TAIL


def test_on_a_file_text_and_json(tmp_path, capsys, traces):
    f = tmp_path / "traces.jsonl"
    f.write_text(json.dumps(json.loads(v3_body(traces))["result"]) + "\n")
    assert run_cli("--file", str(f)) == 0
    out = capsys.readouterr().out
    assert out.startswith("GPU time: ") and f"over {N} steps" in out
    worst = next(ln for ln in out.splitlines() if ln.startswith("  step "))
    assert worst.startswith(f"  step {TAIL_STEP}: goodput") and "waiting for the long tail" in worst, out
    assert "waiting for the long tail cost" in out and "partial rollout" in out
    assert run_cli("--file", str(f), "--json") == 0
    _check_json(capsys.readouterr().out, traces)


def test_the_measured_busy_share_where_the_gpus_were_read(tmp_path, capsys):
    """Step spans whose buckets carry their GPUs' measured busy share: a column of the table, the advice for a
    useful bucket whose GPUs were mostly waiting, and ``busy_share`` per step and over the run in --json."""
    measured = {"rollout": 0.8, "update_actor": 0.41, "old_log_prob": 0.7}
    f = tmp_path / "traces.jsonl"
    spans = _with_goodput(many_steps(N, slow_step=2), measured)
    f.write_text(json.dumps(json.loads(v3_body(spans))["result"]) + "\n")
    assert run_cli("--file", str(f)) == 0
    out = capsys.readouterr().out
    assert "measured busy" in out.splitlines()[2]  # the table's header
    actor = next(ln for ln in out.splitlines() if ln.startswith("actor update"))
    assert actor.split()[-1] == "41%", out
    assert "update_actor: 41% of its GPU time measured busy" in out and "micro-batches" in out
    assert "no measured busy share" not in out
    assert run_cli("--file", str(f), "--json") == 0
    got = json.loads(capsys.readouterr().out)
    for row in got["steps"]:
        assert row["busy_share"]["update_actor"] == pytest.approx(0.41)
        assert row["busy_share"]["generating"] == pytest.approx(0.8)
    assert got["busy_share"]["update_actor"] == pytest.approx(0.41)
    assert got["busy_share"]["old_log_prob"] == pytest.approx(0.7)
    assert sc.BUCKET_REF not in got["busy_share"]  # not measured: absent
    tail = next(a for a in got["advice"] if a["bucket"] == sc.BUCKET_LONG_TAIL)
    assert tail["busy_share"] == pytest.approx(0.8)


def test_on_jaeger(capsys, traces):
    j = FakeJaeger({"/api/v3/traces": (200, v3_body(traces))})
    try:
        assert run_cli("--jaeger", j.url, "--json", "--since", "3h") == 0
        _check_json(capsys.readouterr().out, traces)
    finally:
        j.close()


def test_spans_without_goodput_and_exclusive_sources(tmp_path, capsys):
    f = tmp_path / "traces.jsonl"
    f.write_text(json.dumps(json.loads(v3_body(_shift(many_steps(3, slow_step=2))))["result"]) + "\n")
    assert run_cli("--file", str(f)) == 2
    assert "no step with goodput attributes" in capsys.readouterr().err
    assert run_cli("--file", str(f), "--prometheus", "http://127.0.0.1:9") == 2
    assert "alternatives" in capsys.readouterr().err


def _shift(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    shift = time.time_ns() - 3600 * 10**9 - int(spans[0]["startTimeUnixNano"])
    for s in spans:
        s["startTimeUnixNano"] = str(int(s["startTimeUnixNano"]) + shift)
        s["endTimeUnixNano"] = str(int(s["endTimeUnixNano"]) + shift)
    return spans


def test_on_prometheus(prom_factory, capsys):
    """The run's totals from a real Prometheus scraping the trainer's real /metrics page."""
    store = MetricStore()
    for bucket, gpu_s in (("generating", 500.0), ("long_tail", 300.0), ("update_actor", 150.0), ("idle", 50.0)):
        store.inc(sc.GPU_SECONDS, (sc.POOL_COLOCATED, bucket), gpu_s)
    address = f"127.0.0.1:{serve(store, '127.0.0.1', 0)}"
    prom = prom_factory(
        config={
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [{"job_name": "verl", "static_configs": [{"targets": [address]}]}],
        }
    )
    deadline = time.time() + 30
    while time.time() < deadline and not prom.query(sc.GPU_SECONDS.name):
        time.sleep(0.3)
    assert run_cli("--prometheus", prom.url, "--json", "--since", "10m") == 0
    got = json.loads(capsys.readouterr().out)
    assert got["gpu_seconds"] == pytest.approx(1000.0) and got["steps"] == []
    assert got["buckets"]["long_tail"] == pytest.approx(300.0)
    assert [a["bucket"] for a in got["advice"]] == [sc.BUCKET_LONG_TAIL, sc.BUCKET_IDLE]
    assert run_cli("--prometheus", "http://127.0.0.1:9") == 2
    assert "cannot query" in capsys.readouterr().err
