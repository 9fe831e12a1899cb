"""Scale of the trainer's trackers and of the run's Prometheus series (bench/scale.py runs each in a process of its
own, since they set environment variables and the runtime):

- ``trainer STEPS KEYS``: STEPS steps through the real step tracer and trainer metrics (a step span, two phases,
  verl's metrics log of KEYS keys, a new value per key each step), exported to the trace file by the flusher;
  resident memory after a warm-up of 20 steps and at the end, and the /metrics page's series both times (the
  same count: no label takes a per-step value).
- ``rank``: a training rank's /metrics page (its update gauges for actor and critic, the stall watch's, the drop
  counters).
- :func:`series` counts the samples of a MetricStore's rendered page (``name{labels} value`` lines).

Prints ``SCALE_TRAINER {json}``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any, ClassVar


def rss_mb() -> float:
    """Resident memory now (not the peak): /proc/self/statm's second field."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def series(store: Any) -> int:
    from prometheus_client import CollectorRegistry, generate_latest

    from verl_otel.export.prometheus import StoreCollector

    reg = CollectorRegistry(auto_describe=False)
    reg.register(StoreCollector(store))
    return sum(1 for line in generate_latest(reg).decode().splitlines() if line and not line.startswith("#"))


def _runtime() -> Any:
    os.environ.update(VERL_OTEL_DIR=tempfile.mkdtemp(prefix="verl-otel-scale-"), VERL_OTEL_CONSOLE="0")
    from verl_otel import runtime

    runtime.reset_for_tests()
    return runtime.current()


def trainer(steps: int, keys: int) -> dict[str, float]:
    from verl_otel import semconv as sc
    from verl_otel import trackers
    from verl_otel.hooks import verl_objects
    from verl_otel.telemetry.steps import StepTracer
    from verl_otel.telemetry.trainer_metrics import TrainerMetrics

    rt = _runtime()
    rt.wire(sc.PROCESS_ROLE_TRAINER)
    tracer = StepTracer(trackers.current().services)
    tracer.observers.append(TrainerMetrics(rt.store))

    class Trainer:
        global_steps = 1
        config: ClassVar[dict] = {"trainer": {"project_name": "p", "experiment_name": "e"}}

    t = Trainer()
    tracer.fit_started(verl_objects.run_info(t, "bench"), verl_objects.global_step_reader(t))
    out: dict[str, float] = {}
    for step in range(1, steps + 1):
        t.global_steps = step
        tracer.phase_enter("step")
        tracer.phase_exit(tracer.phase_enter("gen"), None)
        tracer.phase_exit(tracer.phase_enter("update_actor"), None)
        tracer.metrics_logged({f"actor/metric_{i}": float(step * i) for i in range(keys)}, step)
        if step % 20 == 0:
            rt.flush_wait(30)  # the flusher keeps up, as it does between real steps
        if step == 20:
            out["rss_warm_mb"], out["series_warm"] = rss_mb(), series(rt.store)
    rt.flush_wait(30)
    out["rss_end_mb"], out["series_end"] = rss_mb(), series(rt.store)
    tracer.fit_ended(None)
    return out


def rank() -> dict[str, float]:
    from verl_otel import semconv as sc
    from verl_otel import trackers

    rt = _runtime()
    m = trackers.current()
    TRACKER = m.update  # noqa: N806
    m.wire(sc.PROCESS_ROLE_WORKER, worker_index=0)
    rt.stalls  # noqa: B018 - the stall watch registers its gauges on first use
    for role in ("actor", "critic"):
        TRACKER.begin(role, 16, 1, step=1)
        TRACKER.minibatch_done(role)
    return {"series": series(rt.store)}


if __name__ == "__main__":
    got = trainer(int(sys.argv[2]), int(sys.argv[3])) if sys.argv[1] == "trainer" else rank()
    print("SCALE_TRAINER " + json.dumps(got), flush=True)
    os._exit(0)  # the runtime's exit flush has nothing left to do
