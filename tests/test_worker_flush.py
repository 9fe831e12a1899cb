"""Fit end for Ray's worker processes (hooks/worker_flush.py), with real Ray: a worker actor whose spans wait for
a collector that is not there is asked through Ray's ``__ray_call__``; within the shutdown budget it writes them
to its own ``unsent/`` file (Ray would end it without ``atexit``), the trainer's wait stays within the budget,
the worker keeps answering, and a handle that cannot be asked costs one warning line."""

from __future__ import annotations

import os
import socket
import time

import pytest

from helpers.otlp_receiver import free_port
from helpers.ray import ray_init

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel.analysis.otlp_json import read_file
from verl_otel.export.flusher import ShutdownBudget
from verl_otel.hooks.worker_flush import WorkerFlush

BUDGET_S = 3.0
SPANS = 7


@pytest.fixture
def ray_session():
    import ray

    ray_init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_a_worker_spills_at_fit_end_within_the_budget(tmp_path, ray_session, otel_log):
    ray = ray_session

    class Worker:  # local: Ray pickles it by value
        def work(self, n: int) -> int:
            from verl_otel import runtime

            tracer = runtime.current().tracer
            for i in range(n):
                with tracer.start_as_current_span(f"worker-call-{i}"):
                    pass
            return os.getpid()

    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",  # nobody there
        sc.ENV_DIR: str(tmp_path),
        sc.ENV_SHUTDOWN_TIMEOUT: "30",  # the worker's own budget: the trainer's decides
    }
    actor = ray.remote(Worker).options(runtime_env={"env_vars": env}).remote()
    pid = ray.get(actor.work.remote(SPANS), timeout=120)
    unsent = tmp_path / sc.UNSENT_DIR / f"spans-{socket.gethostname()}-{pid}.jsonl"
    assert not unsent.exists()

    flush = WorkerFlush(lambda: [actor, object()], ShutdownBudget(BUDGET_S), trackers.current().reward_emit)
    t0 = time.monotonic()
    flush.start()
    flush.wait()
    elapsed = time.monotonic() - t0
    assert elapsed <= BUDGET_S + 0.5, elapsed  # never past the budget, whatever the endpoint does

    assert unsent.exists(), sorted(p.name for p in (tmp_path / sc.UNSENT_DIR).glob("*"))
    assert sorted(s.name for s in read_file(unsent).spans) == sorted(f"worker-call-{i}" for i in range(SPANS))
    assert ray.get(actor.work.remote(0), timeout=30) == pid  # the worker goes on
    said = [w for w in otel_log.warnings() if "cannot be asked to flush" in w]
    assert len(said) == 1 and said[0].startswith("1 worker processes"), otel_log.warnings()
