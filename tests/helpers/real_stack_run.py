"""One CPU demo run pushed through the real stack (tests/test_e2e_real_stack.py): OTEL_EXPORTER_OTLP_ENDPOINT points
it at the Collector (and OTEL_METRIC_EXPORT_INTERVAL, see below). While it runs, a probe kills Jaeger before the
first span, kills the Collector (SIGKILL: its export queue is on disk) and starts it and then Jaeger again once the
slow step began, and watches Prometheus and Alertmanager for the hung phase planted in step 3 (update_actor sleeps
SLOW_S; the rules are written with a low phase_hung_min_s)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.procs import ROOT
from helpers.prom import PromClient
from helpers.real_stack import am_alerts, go_binaries, scrape, system_binaries, wait_until
from helpers.verl_runs import DemoRun, start_demo

from verl_otel import semconv as sc
from verl_otel.native import Ports, Stack, down, up

STEPS = 3
SLOW_STEP = 3
# long enough for VerlPhaseHung: above the floor (10 s), the Collector's restart (its gauges back at the next push),
# a 15 s push, a 5 s scrape, a 15 s evaluation, then `for: 15s` (an evaluation later): about 75 s, 25 s to spare
SLOW_S = 100
HUNG_ALERT = "VerlPhaseHung"
EXPORT_INTERVAL_MS = 15_000
THRESHOLDS = ["phase_hung_min_s=10", "phase_hung_factor=2", "phase_hung_for=15s"]


def accepted_spans(stack: Stack) -> float:
    text = scrape(f"http://127.0.0.1:{stack.ports.collector_telemetry}/metrics")
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("otelcol_receiver_accepted_spans")
    )


@dataclass
class Outage:
    """What the probe did to the stack, with the times (time.time())."""

    jaeger_killed: float | None = None
    accepted_at_kill: float = 0.0
    accepted_before_restart: float = 0.0
    collector_restarted: float | None = None
    jaeger_restarted: float | None = None
    errors: list[str] = field(default_factory=list)


class Probe:
    """Called by start_demo every half second while the demo runs."""

    def __init__(self, stack: Stack, binaries: dict[str, Path]) -> None:
        self.stack, self.binaries = stack, binaries
        self.prom = PromClient(stack.prometheus_url)
        self.outage = Outage()
        self.am_seen: dict[str, dict[str, Any]] = {}  # alertname -> the alert as Alertmanager listed it first
        self.prom_firing: set[str] = set()
        self.last = 0.0

    def _step(self) -> float:
        try:
            return max(self.prom.scalar_by(f"max({sc.TRAINING_STEP.name})").values(), default=-1.0)
        except (OSError, ValueError):
            return -1.0

    def __call__(self, out: Path) -> None:
        now = time.time()
        if now - self.last < 2.0:
            return
        self.last = now
        for alert in am_alerts(self.stack.alertmanager_url):
            self.am_seen.setdefault(alert["labels"]["alertname"], alert)
        with contextlib.suppress(OSError, ValueError):
            self.prom_firing |= {r["metric"]["alertname"] for r in self.prom.query('ALERTS{alertstate="firing"}')}
        o = self.outage
        try:
            if o.jaeger_killed is None:  # before the run's first span: every span passes the Collector's queue
                o.accepted_at_kill = accepted_spans(self.stack)
                self.stack.stop("jaeger", crash=True)
                o.jaeger_killed = now
            elif o.collector_restarted is None and self._step() >= SLOW_STEP and now - o.jaeger_killed >= 15:
                # steps 0..SLOW_STEP-1 have ended and their spans wait in the queue; the planted hang begins
                o.accepted_before_restart = accepted_spans(self.stack)
                self.stack.stop("collector", crash=True)  # SIGKILL: what it acknowledged is on disk already
                self.stack.start("collector", ROOT, self.binaries, timeout_s=120)
                o.collector_restarted = time.time()
                self.stack.start("jaeger", ROOT, self.binaries, timeout_s=120)  # same port, same Badger files
                o.jaeger_restarted = time.time()
        except Exception as err:  # noqa: BLE001 - recorded and asserted on, the run goes on
            o.errors.append(repr(err))


@dataclass
class RealRun:
    stack: Stack
    run: DemoRun
    probe: Probe
    prom: PromClient
    binaries: dict[str, Path]


def start(tmp: Path) -> RealRun:
    from verl_otel.dashboards import build

    binaries = {**go_binaries(), **system_binaries()}
    rules = tmp / "rules"
    rules.mkdir(parents=True, exist_ok=True)
    args = [a for t in THRESHOLDS for a in ("--threshold", t)]
    assert build.main([*args, "--rules-out", str(rules / "verl-alerts.yml")]) == 0
    stack = up(ROOT, tmp / "state", Ports.free(), binaries=dict(binaries), rules=rules, timeout_s=180)
    try:
        probe = Probe(stack, binaries)
        run = start_demo(
            tmp / "demo",
            "v1",
            STEPS,
            [f"update_actor@{SLOW_STEP}={SLOW_S}"],
            scrape=False,
            probe=probe,
            extra_env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": stack.otlp_endpoint,
                # the Collector's prometheus exporter shows a histogram's exemplar only until the next export
                # replaces the data point (cumulative, no new exemplar): exporting less often than Prometheus
                # scrapes (5s) is what lets every exemplar be scraped
                "OTEL_METRIC_EXPORT_INTERVAL": str(EXPORT_INTERVAL_MS),
            },
        )
        if probe.outage.jaeger_restarted is None and "jaeger" not in stack.pids:  # the run ended first
            stack.start("jaeger", ROOT, binaries, timeout_s=120)
        prom = PromClient(stack.prometheus_url)
        # the queries' time: the run's final state scraped, the last validation still inside the dashboards'
        # 1m windows (as Grafana shows it right after the run)
        wait_until(lambda: _settled(prom), timeout=90)
        prom.at = time.time()
    except BaseException:
        down(stack.state)
        raise
    return RealRun(stack, run, probe, prom, binaries)


def _settled(prom: PromClient) -> bool:
    try:
        step = prom.scalar_by(f"max({sc.TRAINING_STEP.name})").get((), -1.0)
        active = prom.scalar_by(f"sum({sc.PHASE_ACTIVE.name})").get((), 1.0)
    except (OSError, ValueError):
        return False
    return step >= STEPS and active == 0.0
