"""Trainer-process metrics: run progress and ETA, the phase running now with its live elapsed time
(the heartbeat that tells a slow phase from a hung one), step/phase duration histograms with the
step's trace id as exemplar, and every scalar verl logs as a training curve."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from verl_otel import semconv as sc
from verl_otel.process.metrics import MetricStore, Reading
from verl_otel.process.text import as_text
from verl_otel.telemetry.eta import RunEta
from verl_otel.telemetry.step_tokens import per_1k
from verl_otel.telemetry.steps import RunInfo, StepObserver, StepResult
from verl_otel.telemetry.values import to_scalar

MAX_KEY_CHARS = 200


class TrainerMetrics(StepObserver):
    """The step tracer's events as metrics in a :class:`MetricStore`."""

    def __init__(self, store: MetricStore, eta_window: int = 5) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._running: dict[str, float] = {}  # phase -> monotonic start
        self._planned: int | None = None
        self._eta = RunEta(eta_window)
        store.add_source(self._live)

    def _live(self) -> Iterable[Reading]:
        now = time.monotonic()
        with self._lock:
            running = dict(self._running)
        for phase, start in running.items():
            yield sc.PHASE_ELAPSED, (phase,), now - start

    def on_fit_start(self, run: RunInfo) -> None:
        self._planned = run.steps_planned
        if run.steps_planned is not None:
            self._store.set(sc.TRAINING_STEPS_PLANNED, (), float(run.steps_planned))

    def on_phase_start(self, phase: str, global_step: int) -> None:
        with self._lock:
            self._running[phase] = time.monotonic()
        self._store.set(sc.PHASE_ACTIVE, (phase,), 1.0)
        self._store.set(sc.PHASE_ELAPSED, (phase,), 0.0)
        if global_step >= 0:
            self._store.set(sc.TRAINING_STEP, (), float(global_step))

    def on_phase_end(self, phase: str, global_step: int, seconds: float, trace_id: str) -> None:
        with self._lock:
            self._running.pop(phase, None)
        self._store.set(sc.PHASE_ACTIVE, (phase,), 0.0)
        self._store.set(sc.PHASE_ELAPSED, (phase,), 0.0)
        self._store.observe(sc.PHASE_DURATION, (phase,), seconds, trace_id)

    def on_step_end(self, result: StepResult) -> None:
        self._store.set(sc.TRAINING_STEP, (), float(result.global_step))
        self._store.set(sc.TRAINING_LAST_STEP, (), time.time())
        if result.global_step <= 0:
            return  # the validation before training is no training step
        self._store.observe(sc.STEP_DURATION, (), result.seconds, result.trace_id)
        if result.tokens is not None:
            for phase, seconds in result.phases.items():
                tokens = result.tokens.of_phase(phase)
                rate = per_1k(seconds, tokens) if tokens is not None else None
                if rate is not None:
                    self._store.set(sc.PHASE_S_PER_1K_TOKENS, (phase,), rate)
        split = result.goodput
        if split is not None:  # what the step's GPU time went to (semconv/goodput.py)
            for pool, buckets in split.pools.items():
                for bucket, gpu_s in buckets.items():
                    self._store.inc(sc.GPU_SECONDS, (pool, bucket), gpu_s)
            self._store.set(sc.GOODPUT_RATIO, (), split.ratio)
            for bucket, gpu_s in split.totals().items():
                self._store.set(sc.STEP_GPU_SECONDS, (bucket,), gpu_s)
        self._eta.add_step(result.seconds)
        eta = self._eta.eta(result.global_step, self._planned)
        if eta is not None:
            self._store.set(sc.TRAINING_ETA, (), eta)

    def on_metrics(self, data: Mapping[str, Any], global_step: int) -> None:
        record_training_metrics(self._store, data)


def record_training_metrics(store: MetricStore, data: Mapping[str, Any]) -> int:
    """Set ``verl_training_metric{key}`` for every finite scalar; count the rest as dropped.
    Returns how many were recorded. Keys are kept as verl wrote them (cut to 200 characters, and
    anything that is not valid UTF-8 replaced)."""
    recorded = 0
    for key, raw in list(data.items()):
        value, reason = to_scalar(raw)
        if value is None:
            store.drop(reason or sc.DROP_NON_SCALAR)
            continue
        label = as_text(key, MAX_KEY_CHARS)
        if label is None:  # a key whose str() raises: dropped and counted, the rest still export
            store.drop(sc.DROP_BAD_KEY)
            continue
        if store.set(sc.TRAINING_METRIC, (label,), value):
            recorded += 1
    return recorded
