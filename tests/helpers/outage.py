"""A real demo run whose OTLP receiver refuses spans (``UNAVAILABLE``) until after the run, metrics taken, then
``verl-otel push`` to it (tests/test_e2e_outage.py, tests/test_e2e_outage_async.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from helpers.otlp_receiver import OtlpReceiver
from helpers.verl_runs import DemoRun, start_demo

from verl_otel import semconv as sc
from verl_otel.cli.main import main


@dataclass
class LongOutage:
    run: DemoRun
    rx: OtlpReceiver
    files: list[str]  # unsent/ after the run, before push
    push_rc: int


@contextlib.contextmanager
def refused_until_after(out: Path, trainer: str, steps: int) -> Iterator[LongOutage]:
    rx = OtlpReceiver().start()
    rx.refuse, rx.refuse_metrics = grpc.StatusCode.UNAVAILABLE, False  # spans refused, metrics taken
    try:
        run = start_demo(
            out,
            trainer,
            steps,
            [],
            scrape=False,
            extra_env={"OTEL_EXPORTER_OTLP_ENDPOINT": rx.grpc_endpoint, "OTEL_METRIC_EXPORT_INTERVAL": "1000"},
        )
        files = sorted(p.name for p in (out / sc.UNSENT_DIR).glob("*.jsonl"))
        assert len(rx.received.spans) == 0  # refused until now
        rx.refuse = None
        rc = main(["push", "--dir", str(out), "--endpoint", rx.grpc_endpoint])
        yield LongOutage(run, rx, files, rc)
    finally:
        rx.stop()
