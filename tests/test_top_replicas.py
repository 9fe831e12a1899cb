"""`verl-otel top`'s rollout replicas: vLLM-style /metrics pages (prometheus_client, as vLLM writes them: gauges and
a counter per engine, with colons in the names) listed in a targets file as rollout servers; frames over time mark
STUCK the replica with requests running whose token count stopped moving for the alert rule's window, not an
idle one, not one still generating, and not after a single frame (`--once`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from rich.console import Console

from helpers.prom import MetricsEndpoint

from verl_otel import semconv as sc
from verl_otel.cli.main import main
from verl_otel.dashboards.thresholds import DEFAULTS, duration_seconds
from verl_otel.live.health_table import signals
from verl_otel.live.replicas import ReplicaWatch
from verl_otel.live.run_view import History, build_view
from verl_otel.live.sources import PrometheusQuery, TargetsFile
from verl_otel.live.view import dur, frame


class VllmPage:
    """One rollout server's page: ``running`` requests and a token counter, per engine as vLLM labels them."""

    def __init__(self, running: float, tokens: float) -> None:
        self.running, self.tokens = running, tokens

    def text(self) -> str:
        registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        running = Gauge(sc.VLLM_REQUESTS_RUNNING, "running", labels, registry=registry)
        waiting = Gauge(sc.VLLM_REQUESTS_WAITING, "waiting", labels, registry=registry)
        tokens = Counter(sc.VLLM_GENERATION_TOKENS.removesuffix("_total"), "tokens", labels, registry=registry)
        running.labels("m", "0").set(self.running)
        waiting.labels("m", "0").set(0)
        tokens.labels("m", "0").inc(self.tokens)
        return generate_latest(registry).decode()


def _targets(tmp_path: Path, pages: dict[str, MetricsEndpoint]) -> Path:
    path = tmp_path / sc.PROM_TARGETS_FILE
    groups = [
        {
            "targets": [ep.address],
            "labels": {sc.LABEL_PROCESS_ROLE: sc.PROCESS_ROLE_ROLLOUT_SERVER, sc.LABEL_REPLICA: rep},
        }
        for rep, ep in pages.items()
    ]
    path.write_text(json.dumps(groups))
    return path


def _text(view) -> str:
    console = Console(width=160, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    history = History()
    console.print(frame(view, history, signals(view, history), now=time.time()))
    return console.export_text()


def _row(text: str, replica: str) -> list[str]:
    table = text.split("rollout replicas (vLLM)")[1].splitlines()
    return next(ln.split() for ln in table[2:] if ln.split()[:1] == [replica])


def test_the_replica_whose_tokens_stopped_with_requests_running_is_stuck(tmp_path):
    hung, busy, idle = VllmPage(4, 100), VllmPage(4, 100), VllmPage(0, 50)
    with MetricsEndpoint(hung.text) as h, MetricsEndpoint(busy.text) as b, MetricsEndpoint(idle.text) as i:
        source = TargetsFile(_targets(tmp_path, {"0": h, "1": b, "2": i}))
        watch = ReplicaWatch()
        window = duration_seconds(DEFAULTS.engine_no_tokens_window)  # the alert rule's, by default
        assert watch.stuck_after_s == window
        t0 = 1000.0
        texts = []
        for k, now in enumerate((t0, t0 + window / 2, t0 + window + 1)):
            busy.tokens += 40  # replica 1 keeps generating; 0 and 2 do not
            view = build_view(source.read())
            view.replicas = watch.update(view.replicas, now)
            texts.append(_text(view))
            assert [r.replica for r in view.replicas] == ["0", "1", "2"], (k, view.replicas)
        first, middle, last = texts
        assert "STUCK" not in first and "STUCK" not in middle, middle
        assert _row(last, "0")[:5] == ["0", "STUCK", "4", "0", "100"], last
        assert _row(last, "1")[:2] == ["1", "ok"] and _row(last, "2")[:2] == ["2", "idle"], last
        assert f"STUCK rollout: replica 0 (4 running, no token for {dur(window + 1)})" in " ".join(last.split())
        assert "replica 1 " not in last.split("STUCK rollout:")[1].splitlines()[0]
        # it moves again: no longer stuck
        hung.tokens += 1
        view = build_view(source.read())
        view.replicas = watch.update(view.replicas, t0 + window + 2)
        assert not any(r.stuck for r in view.replicas) and "STUCK" not in _text(view)


def test_once_shows_the_replicas_but_marks_none(tmp_path, capsys):
    """One frame cannot tell how long the count has stood still: `--once` lists the replicas, none STUCK."""
    with MetricsEndpoint(VllmPage(3, 7).text) as ep:
        _targets(tmp_path, {"0": ep})
        assert main(["top", "--once", "--targets", str(tmp_path), "--width", "150"]) == 0
    out = capsys.readouterr().out
    assert _row(out, "0")[:5] == ["0", "ok", "3", "0", "7"], out
    assert "STUCK" not in out


def test_a_replica_with_no_token_counter_is_listed_unwatched():
    from verl_otel.live.replicas import Replica

    rows = ReplicaWatch(5.0).update([Replica("h:1", "0", running=2.0)], 100.0)
    assert rows == [Replica("h:1", "0", running=2.0)]


def test_prometheus_source_reads_the_engine_series_too():
    sel = PrometheusQuery("localhost:9090").selector()
    for name in (sc.VLLM_REQUESTS_RUNNING, sc.VLLM_REQUESTS_WAITING, sc.VLLM_GENERATION_TOKENS):
        assert name in sel
