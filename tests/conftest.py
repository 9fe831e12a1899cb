import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


def clean_env(**extra: str) -> dict[str, str]:
    """The test process' environment without any telemetry settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VERL_OTEL_", "OTEL_", "VERL_PROGRESS_", "VERL_ROLLOUT_PROGRESS_"))}
    env.update(extra)
    return env


def run_py(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def drive(tmp_path: Path):
    def _run(steps: int = 2, fail_phase: str | None = None, **env: str) -> subprocess.CompletedProcess:
        args = [str(Path(__file__).parent / "drive_hooks.py"), str(steps)] + ([fail_phase] if fail_phase else [])
        return run_py(args, clean_env(**env), tmp_path)
    return _run


# -- real-verl demo runs, shared by the e2e tests (each takes a minute or two on 2 cores) ---------
LINGER_S = 12.0
PROGRESS_LOG = {"VERL_PROGRESS_LOG": "1"}  # the seed's lines beside the telemetry (tests/test_e2e_console.py)


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

    def series(self) -> set:
        """Label sets of every series of the run, without the per-process identities."""
        data = self.prom.api("series", **{"match[]": '{job="verl"}', "start": self.query_time - 600,
                                          "end": self.query_time})
        return {frozenset((k, v) for k, v in s.items() if k not in ("instance",)) for s in data}


def _settled(prom, steps: int) -> bool:
    try:
        step = prom.scalar_by("max(verl_training_step)")
        active = prom.scalar_by("sum(verl_phase_active)")
    except (OSError, ValueError):
        return False
    return step.get((), -1.0) >= float(steps) and active.get((), 1.0) == 0.0


def start_demo(out: Path, trainer: str, steps: int, slow: list[str], scrape: bool, probe: Any = None,
               **kw: Any) -> DemoRun:
    """``probe(out)``, if given, is called every half second while the run is up (e.g. `verl-otel top`)."""
    from prom_server import PromServer

    from verl_otel.demo.runner import run_demo

    out.mkdir(parents=True, exist_ok=True)
    prom = PromServer(out / "prom", out / "prometheus_targets.json").start() if scrape else None
    result: dict[str, int] = {}
    env = {k: v for k, v in clean_env().items()}
    th = threading.Thread(target=lambda: result.update(rc=run_demo(
        steps=steps, out=out, trainer=trainer, slow=slow, linger=LINGER_S if scrape else 0.0, quiet=True,
        extra_env=kw.pop("extra_env", None), **kw)))
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the demo's environment: no telemetry settings leak from the test process
    try:
        th.start()
        query_time = None
        settled_since = None
        targets: list = []
        while th.is_alive():
            if probe is not None:
                probe(out)
            if prom is not None and query_time is None:
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
    run = DemoRun(out=out, rc=result.get("rc", -1), steps=steps, trainer=trainer, prom=prom, query_time=query_time,
                  extra={"targets": targets}, slow=list(slow))
    if prom is not None:
        prom.at = query_time
    return run


@pytest.fixture(scope="session")
def v1_run(tmp_path_factory):
    from top_probe import TopProbe

    probe = TopProbe()  # `verl-otel top` watching the run while it runs (tests/test_e2e_top.py)
    run = start_demo(tmp_path_factory.mktemp("demo-v1"), "v1", 3, ["update_actor@3=3", "rollout_sample@3=2"],
                     scrape=True, probe=probe, extra_env=PROGRESS_LOG)
    run.extra["top"] = probe
    run.extra["top_live_rc"] = probe.stop()
    yield run
    run.prom.stop()


@pytest.fixture(scope="session")
def v1_run_6(tmp_path_factory):
    run = start_demo(tmp_path_factory.mktemp("demo-v1-6"), "v1", 6, [], scrape=True)
    yield run
    run.prom.stop()


@pytest.fixture(scope="session")
def legacy_run(tmp_path_factory):
    # the last step is not the slow one: its reward spans must come at its end, not after an idle wait
    return start_demo(tmp_path_factory.mktemp("demo-legacy"), "legacy", 3, ["update_actor@2=3"], scrape=False,
                      adv="gae", extra_env=PROGRESS_LOG)


@pytest.fixture(scope="session")
def colocate_async_run(tmp_path_factory):
    return start_demo(tmp_path_factory.mktemp("demo-colocate"), "colocate_async", 2, [], scrape=False)


@pytest.fixture(scope="session")
def separate_async_run(tmp_path_factory):
    # scraped: the phase histograms must count each of a step's repeated phases
    run = start_demo(tmp_path_factory.mktemp("demo-separate"), "separate_async", 3, [], scrape=True)
    yield run
    run.prom.stop()


@pytest.fixture(scope="session")
def fully_async_run(tmp_path_factory):
    # scraped: the async dashboard panels are queried on what the rollouter and trainer exported
    run = start_demo(tmp_path_factory.mktemp("demo-fully-async"), "fully_async", 3, [], scrape=True,
                     extra_env=PROGRESS_LOG)
    yield run
    run.prom.stop()
