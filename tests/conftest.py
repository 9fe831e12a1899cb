"""Fixtures only; what the tests share besides them lives in tests/helpers/."""

import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `helpers` for the test modules

from helpers.logs import OtelLog
from helpers.procs import TESTS, clean_env, run_py
from helpers.prom import PromServer, available
from helpers.tiers import TIMEOUT_S, item_tier
from helpers.verl_runs import CAPTURE_NEXT, PROGRESS_LOG, STALL_MATRIX, TOOL_HANG_S, TOOL_THRESHOLDS, start_demo


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the processes the tests start as it reaches a terminal's job: a test run started in the
    background of a shell without job control (``make test &``) ignores SIGINT, and an ignored signal is inherited
    (a handler is not: a child starts with the default). tests/test_*run_end.py and test_e2e_readme.py send it."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test gets its tier's mark (helpers/tiers.py): unit, integration or e2e (and `verl`, e2e's old name),
    and the modules of helpers.tiers.TIMEOUT_S their longer per-test timeout."""
    for item in items:
        if item.path.name in TIMEOUT_S and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIMEOUT_S[item.path.name]))
        tier = item_tier(item)
        item.add_marker(tier)
        if tier == "e2e":
            item.add_marker("verl")


@pytest.fixture
def drive(tmp_path: Path):
    def _run(steps: int = 2, fail_phase: str | None = None, **env: str) -> subprocess.CompletedProcess:
        args = [str(TESTS / "drive_hooks.py"), str(steps)] + ([fail_phase] if fail_phase else [])
        return run_py(args, clean_env(**env), tmp_path)

    return _run


@pytest.fixture
def otel_log() -> Iterator[OtelLog]:
    """verl-otel's log lines during the test (``otel_log.warnings()``), with warn-once's memory emptied first:
    a warning the code under test owes is logged even when an earlier test in this process logged the same
    one (``verl_otel._log._seen`` is process-wide). Captured at every level, whatever VERL_OTEL_LOG_LEVEL."""
    from verl_otel import _log

    capture = OtelLog()
    with _log._lock:
        seen = set(_log._seen)
        _log._seen.clear()
    level = _log.logger.level
    _log.logger.setLevel(logging.DEBUG)
    _log.logger.addHandler(capture)
    try:
        yield capture
    finally:
        _log.logger.removeHandler(capture)
        _log.logger.setLevel(level)
        with _log._lock:
            _log._seen.update(seen)


@pytest.fixture
def recent_spans():
    """A run's spans as the OTel SDK wrote them (helpers.step_spans.sdk_run), its first step an hour ago."""
    from helpers.step_spans import S, sdk_run

    return sdk_run(time.time_ns() - 3600 * S)


@pytest.fixture
def prom_factory(tmp_path: Path) -> Iterator[Callable[..., PromServer]]:
    """Start real Prometheus servers: ``prom_factory(config=..., args=..., agent=...)`` or
    ``prom_factory(file_sd=...)``; all are stopped when the test ends. Skips when the binary is absent."""
    if not available():
        pytest.skip("prometheus/promtool not installed (`make prometheus` or apt-get install prometheus)")
    started: list[PromServer] = []

    def start(**kw: Any) -> PromServer:
        server = PromServer(tmp_path / f"prom{len(started)}", **kw)
        started.append(server)
        return server.start()

    yield start
    for server in reversed(started):  # an agent stops before the server it flushes its remote-write queue to
        server.stop()


@pytest.fixture(scope="session")
def v1_run(tmp_path_factory):
    from helpers.top_probe import TopProbe

    probe = TopProbe()  # `verl-otel top` watching the run while it runs (tests/test_e2e_top.py)
    run = start_demo(
        tmp_path_factory.mktemp("demo-v1"),
        "v1",
        3,
        # update_actor@3 is also the stall matrix's v1 cell (tests/test_e2e_stall_matrix.py), in step 3 only: the
        # series-growth assert compares step 2's series with step 3's, where a stall's series are new (no growth).
        # Its old_log_prob and ref cells are colocate_async's (the same trainer): slowed here too, they outran
        # update_actor as step 3's slow phase, which test_e2e_demo's slow-steps asserts name
        ["update_actor@3=3", "rollout_sample@3=2"],
        scrape=True,
        probe=probe,
        extra_env=PROGRESS_LOG | STALL_MATRIX,
    )
    run.extra["top"] = probe
    run.extra["top_live_rc"] = probe.stop()
    yield run
    run.prom.stop()


@pytest.fixture(scope="session")
def legacy_run(tmp_path_factory):
    # the last step's training is not slow: its reward spans must come at its end, not after an idle wait.
    # tests/test_e2e_why_slow.py's too (scraped): a long tail in step 3 (the slowest step, above step 4's
    # update_actor) and a slowed weight sync in step 2; the stall matrix's critic cells in step 3, below its tail,
    # its weight-sync cell in step 2, its validation cell in step 5 (the validations of steps 0, 2 and 4 set its
    # median: step 0's, the slowest, is not the median)
    run = start_demo(
        tmp_path_factory.mktemp("demo-legacy"),
        "legacy",
        5,
        [
            *("update_actor@4=3", "rollout_sample@3=6", "update_weights@2=3", "values@3=3", "update_critic@3=3"),
            "validate@5=3",
        ],
        scrape=True,
        adv="gae",
        extra_env=PROGRESS_LOG | STALL_MATRIX | CAPTURE_NEXT,  # step 3's stalls profile step 4 (test_e2e_next_profile)
    )
    yield run
    run.prom.stop()


@pytest.fixture(scope="session")
def colocate_async_run(tmp_path_factory):
    """verl's real ToolAgentLoop with the demo's tools (``--agent tool``; tests/test_e2e_agent_tools.py): the first
    search call of step 2's samples hangs 6 s and every search call of theirs raises (the tool plants count
    ``tool@3``: the weights' version the LLM server answers with, plus one), scraped by a real Prometheus evaluating
    the rules with VerlToolFailing's window and ``for`` shortened. The stall matrix's cells: 4 s, as step 2's
    thresholds come from step 1 alone (its warm-up)."""
    from verl_otel.dashboards import build
    from verl_otel.dashboards.thresholds import Thresholds

    out = tmp_path_factory.mktemp("demo-colocate")
    rules = out / "rules.yml"
    rules.write_text(build.outputs(thresholds=Thresholds.with_overrides(TOOL_THRESHOLDS))[build.RULES])
    run = start_demo(
        out,
        "colocate_async",
        2,
        ["old_log_prob@2=4", "ref@2=4"],
        scrape=True,
        rules=[rules],
        extra_env=STALL_MATRIX,
        agent="tool",
        hang=[f"tool@3={TOOL_HANG_S:g}"],
        fail=["tool@3"],
    )
    yield run
    run.prom.stop()


@pytest.fixture(scope="session")
def separate_async_run(tmp_path_factory):
    """Scraped: the phase histograms must count each of a step's repeated phases. RL-Insight on beside verl-otel
    (helpers/rl_insight.py: its server, its hub actor in the run; ``run.extra["rl_insight"]``), with OTEL_* values
    meant for verl-otel's Collector in the environment: every other test of the run checks ours stay whole. The
    stall matrix's cells: the third calls of old_log_prob and update_actor, in step 2, and the weight sync through
    the checkpoint engine after step 2's update."""
    from helpers.rl_insight import RLInsight

    rli = RLInsight(tmp_path_factory.mktemp("rl-insight")).start()
    try:
        run = start_demo(
            tmp_path_factory.mktemp("demo-separate"),
            "separate_async",
            3,
            ["old_log_prob@3=3", "update_actor@3=3", "update_weights@2=3"],
            scrape=True,
            probe=rli.probe,
            extra_env={**rli.env, **STALL_MATRIX},
            extra_overrides=rli.overrides,
        )
    finally:
        rli.stop()
    run.extra["rl_insight"] = rli
    yield run
    run.prom.stop()


@pytest.fixture(scope="session")
def fully_async_run(tmp_path_factory):
    # scraped: the async dashboard panels are queried on what the rollouter and trainer exported
    run = start_demo(
        tmp_path_factory.mktemp("demo-fully-async"),
        "fully_async",
        3,
        ["ref@3=3", "update_actor@3=3"],  # the stall matrix's cells
        scrape=True,
        extra_env=PROGRESS_LOG | STALL_MATRIX,
    )
    yield run
    run.prom.stop()


@pytest.fixture
def jaeger():
    """``jaeger(routes)`` starts a local Jaeger query service (helpers/jaeger.py); all are closed after the test."""
    from helpers.jaeger import FakeJaeger

    made: list[FakeJaeger] = []

    def make(routes: dict[str, Any]) -> Any:
        made.append(FakeJaeger(routes))
        return made[-1]

    yield make
    for j in made:
        j.close()


@pytest.fixture(scope="module")
def real_stack_run(tmp_path_factory):
    """One CPU demo run pushed through the real Collector, Jaeger, Prometheus and Alertmanager
    (helpers/real_stack_run.py); skips without Go (fails under CI=true). Every process is stopped afterwards."""
    from helpers.real_stack_run import start

    from verl_otel.native import down

    real = start(tmp_path_factory.mktemp("real-stack"))
    try:
        yield real
    finally:
        down(real.stack.state)
