"""Real-verl demo runs (`verl-otel demo`, verl's real entry point on the CPU) for the e2e tests: started in a
thread of the test process, optionally scraped by a real Prometheus and watched by a probe while they run. The
session fixtures in conftest.py share them between modules (each takes a minute or two on 2 cores)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from helpers.procs import ROOT, clean_env
from helpers.prom import PromServer

LINGER_S = 12.0
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"  # the real vLLM's venv (`make install-vllm`)
PROGRESS_LOG = {"VERL_PROGRESS_LOG": "1"}  # the seed's lines beside the telemetry (tests/test_e2e_console.py)
#: stall thresholds the shared runs' planted slow calls (3 s) pass: 3 x the call's median, at least 1.5 s
#: (tests/test_e2e_stall_matrix.py); the first run of a call keeps the 30-minute default
STALL_MATRIX = {"VERL_OTEL_STALL_MIN_SECONDS": "1.5", "VERL_OTEL_STALL_FACTOR": "3"}
#: colocate_async_run (--agent tool): the hung search call's seconds, and VerlToolFailing over a short window
TOOL_HANG_S = 6.0
TOOL_THRESHOLDS = [
    *("tool_failure_window=30s", "tool_failure_for=2s", "tool_failure_min_calls=4", "tool_failure_share=0.3")
]
#: a stall arms verl's own torch profiler for the next step (the demo sets it up: tests/test_e2e_next_profile.py)
CAPTURE_NEXT = {"VERL_OTEL_CAPTURE_NEXT": "1"}


@dataclass
class DemoRun:
    out: Path
    rc: int
    steps: int
    trainer: str
    prom: Any = None
    query_time: float | None = None
    extra: dict = field(default_factory=dict)
    slow: list[str] = field(default_factory=list)

    def slow_step(self, phase: str) -> int:
        """The step whose ``phase`` the run slowed down (its --slow PHASE@STEP=SECONDS)."""
        return next(int(s.split("@")[1].split("=")[0]) for s in self.slow if s.startswith(phase + "@"))

    def log_tail(self, n: int = 4000) -> str:
        return (self.out / "demo.log").read_text(errors="replace")[-n:]

    def series(self, start: float | None = None, end: float | None = None) -> set:
        """Label sets of every series with samples in [start, end] (the whole run by default), without the
        per-process identities."""
        end = self.query_time if end is None else end
        start = end - 600 if start is None else start
        data = self.prom.api("series", **{"match[]": '{job="verl"}', "start": start, "end": end})
        return {frozenset((k, v) for k, v in s.items() if k not in ("instance",)) for s in data}


def _settled(prom, steps: int) -> bool:
    try:
        step = prom.scalar_by("max(verl_training_step)")
        active = prom.scalar_by("sum(verl_phase_active)")
    except (OSError, ValueError):
        return False
    return step.get((), -1.0) >= float(steps) and active.get((), 1.0) == 0.0


def _mark_step(prom, step_times: dict[int, float]) -> None:
    try:
        step = int(prom.scalar_by("max(verl_training_step)").get((), 0.0))
    except (OSError, ValueError):
        return
    if step > 0:
        step_times.setdefault(step, time.time())


def start_demo(
    out: Path, trainer: str, steps: int, slow: list[str], scrape: bool, probe: Any = None, **kw: Any
) -> DemoRun:
    """``probe(out)``, if given, is called every half second while the run is up (e.g. `verl-otel top`);
    ``rules=[PATH]``: the alert rules the scraping Prometheus evaluates (every second)."""
    from verl_otel.demo.runner import run_demo

    out.mkdir(parents=True, exist_ok=True)
    rules = kw.pop("rules", None)  # alert rule files the scraping Prometheus evaluates
    prom = PromServer(out / "prom", out / "prometheus_targets.json", rule_files=rules).start() if scrape else None
    result: dict[str, int] = {}
    env = dict(clean_env())
    th = threading.Thread(
        target=lambda: result.update(
            rc=run_demo(
                steps=steps,
                out=out,
                trainer=trainer,
                slow=slow,
                linger=LINGER_S if scrape else 0.0,
                quiet=True,
                extra_env=kw.pop("extra_env", None),
                **kw,
            )
        )
    )
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the demo's environment: no telemetry settings leak from the test process
    try:
        th.start()
        query_time = None
        settled_since = None
        step_times: dict[int, float] = {}  # when Prometheus first showed each step under way
        targets: list = []
        while th.is_alive():
            if probe is not None:
                probe(out)
            if prom is not None and query_time is None:
                _mark_step(prom, step_times)
                if _settled(prom, steps):
                    settled_since = settled_since or time.time()
                    if time.time() - settled_since >= 3.0:  # a few scrapes of the final state
                        query_time = time.time()
                        # the run's processes take their file_sd entries out at exit: targets as they were
                        targets = prom.targets()
                else:
                    settled_since = None
            time.sleep(0.5)
        th.join()
    finally:
        os.environ.clear()
        os.environ.update(old)
    run = DemoRun(
        out=out,
        rc=result.get("rc", -1),
        steps=steps,
        trainer=trainer,
        prom=prom,
        query_time=query_time,
        extra={"targets": targets, "step_times": step_times},
        slow=list(slow),
    )
    if prom is not None:
        prom.at = query_time
    return run


def vllm_python() -> Path:
    """The vLLM venv's Python; the test is skipped without it."""
    if not VLLM_PY.exists():
        pytest.skip(f"{VLLM_PY} missing: `make install-vllm` builds it (`make test` does)")
    return VLLM_PY


def vllm_demo_cmd(out: Path, *args: str) -> list[str]:
    """`verl-otel demo --rollout vllm ... --out OUT` in the vLLM venv (the test is skipped without it)."""
    return [str(vllm_python()), "-m", "verl_otel.demo", "--rollout", "vllm", "--out", str(out), *args]
