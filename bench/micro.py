"""Microbenchmarks of the hot paths, on the real code (no mocks):

- span_us: one phase span open + close through the step tracer (BatchSpanProcessor, local file).
- progress_update_us: one finished rollout sample (sample_started + sample_finished), the per-sample
  agent-loop cost; target <= 2 us.
- scrape_ms: rendering /metrics for a worker with 2 modes and a trainer with 300 training keys.
- stall_watch_us: the stall watch's enter + exit per watched call; stall_dump_ms: one stall's evidence (stacks,
  frames, file) on the watchdog thread.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any, ClassVar


def _best_of(fn: Callable[[int], None], n: int, repeats: int = 5) -> float:
    """Best per-call time in µs over ``repeats`` batches of ``n`` calls (min filters scheduler noise)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(n)
        times.append((time.perf_counter() - t0) / n * 1e6)
    return min(times)


def span_us(n: int = 200, rounds: int = 30) -> tuple[float, float]:
    """(foreground µs per phase span open+close, background export µs per span). Spans are made in
    bursts of ``n`` with a flush in between, so the export thread does not compete for the GIL
    while the foreground cost is measured (a real step makes about a dozen spans)."""
    os.environ["VERL_OTEL_DIR"] = tempfile.mkdtemp(prefix="verl-otel-bench-")
    os.environ.setdefault("VERL_OTEL_CONSOLE", "0")
    from verl_otel import runtime, trackers
    from verl_otel.hooks import verl_objects
    from verl_otel.telemetry.steps import StepTracer

    runtime.reset_for_tests()
    tracer = StepTracer(trackers.current().services)

    class Trainer:
        global_steps = 1
        config: ClassVar[dict] = {"trainer": {"project_name": "p", "experiment_name": "e"}}

    trainer = Trainer()
    tracer.fit_started(verl_objects.run_info(trainer, "bench"), verl_objects.global_step_reader(trainer))
    tracer.phase_enter("step")
    rt = runtime.current()
    fg, bg = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            tok = tracer.phase_enter("update_actor")
            tracer.phase_exit(tok, None)
        t1 = time.perf_counter()
        rt.flush_wait(60)  # on the flusher thread; waited for here only to time the export
        t2 = time.perf_counter()
        fg.append((t1 - t0) / n * 1e6)
        bg.append((t2 - t1) / n * 1e6)
    tracer.fit_ended(None)
    return min(fg), statistics.median(bg)


def step_end_us(rounds: int = 200, keys: int = 150) -> float:
    """Foreground cost of ending a step (verl's Tracking.log of a 150-key metrics dict) in the embedded
    default: the step span ends, the metrics are recorded, a flush is *requested*; the file write
    happens on the flusher thread. Median µs."""
    os.environ["VERL_OTEL_DIR"] = tempfile.mkdtemp(prefix="verl-otel-bench-")
    os.environ["VERL_OTEL_CONSOLE"] = "0"
    from verl_otel import runtime, trackers
    from verl_otel.hooks import verl_objects
    from verl_otel.telemetry.steps import StepTracer
    from verl_otel.telemetry.trainer_metrics import TrainerMetrics

    runtime.reset_for_tests()
    rt = runtime.current()
    tracer = StepTracer(trackers.current().services)
    tracer.observers.append(TrainerMetrics(rt.store))

    class Trainer:
        global_steps = 1
        config: ClassVar[dict] = {"trainer": {"project_name": "p", "experiment_name": "e"}}

    trainer = Trainer()
    tracer.fit_started(verl_objects.run_info(trainer, "bench"), verl_objects.global_step_reader(trainer))
    data = {f"actor/metric_{i}": float(i) for i in range(keys)}
    times = []
    for step in range(1, rounds + 1):
        trainer.global_steps = step
        tracer.phase_enter("step")
        tracer.phase_exit(tracer.phase_enter("update_actor"), None)
        t0 = time.perf_counter()
        tracer.metrics_logged(data, step)
        times.append((time.perf_counter() - t0) * 1e6)
        if step % 20 == 0:
            rt.flush_wait(30)  # let the flusher keep up between rounds, outside the timed part
    tracer.fit_ended(None)
    return statistics.median(times)


def startup_ms(repeats: int = 7) -> float:
    """Extra import time of an enabled process that never imports verl: the start-up hook itself
    (in a fresh interpreter each time; median ms)."""
    import subprocess
    import sys

    # the .pth line sees none of our variables, so the timed import is the hook's whole start-up cost
    code = (
        "import os, sys, time; os.environ['VERL_OTEL_ENABLED'] = '1'; t = time.perf_counter(); "
        "import verl_otel._autoload; print((time.perf_counter() - t) * 1e3); "
        "assert 'verl_otel.hooks.targets' in sys.modules"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_OTEL_", "OTEL_"))}
    times = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def progress_update_us(n: int = 200000) -> float:
    from verl_otel.telemetry.rollout import RolloutTracker

    tracker = RolloutTracker()
    tracker.keep = 8  # as an agent-loop worker is wired: only the VERL_OTEL_SAMPLE_SPANS slowest are held
    tracker.batch_started("train", 1, 10**9, None)  # never "done": measures the steady state
    traj = {"step": 1, "sample_index": 0, "rollout_n": 0, "validate": False}

    def run(k: int) -> None:
        started, finished = tracker.sample_started, tracker.sample_finished
        for _ in range(k):
            finished("train", started("train"), traj, None)
        tracker.snapshot("train").finished.clear()  # the batch-end emitter would take these

    return _best_of(run, n)


def reward_record_us(n: int = 200000) -> float:
    """Per reward call in a reward-loop worker: the K-slowest bookkeeping (the spans themselves are
    made once per group, off the call path)."""
    from verl_otel import trackers
    from verl_otel.telemetry.reward_spans import RewardSpans

    spans = RewardSpans(trackers.current().services, max_spans=8, background=False)
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    def run(k: int) -> None:
        record = spans.record
        for i in range(k):
            record(tp, i, i + (i * 7919) % 1000, {})

    return _best_of(run, n)


def weight_sync_tensor_us(n: int = 200000) -> tuple[float, float]:
    """Per tensor of a weight sync's export (telemetry/weight_sync_parts.py): the timed stream's cost over the bare
    generator's, and the spans of one sync at its end (the slowest 4 buckets of ``n`` / 64), in µs."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    from verl_otel.telemetry.weight_sync_parts import WeightSync

    class _T:  # nbytes only: the stream reads it, as from a torch tensor
        nbytes = 1 << 20

    item = ("w", _T())
    tracer = TracerProvider().get_tracer("bench")

    def export(k: int) -> Any:
        for _ in range(k):
            yield item

    def bare(k: int) -> None:
        for _ in export(k):
            pass

    syncs: list[WeightSync] = []

    def timed(k: int) -> None:
        sync = WeightSync(tracer, trace.set_span_in_context(trace.INVALID_SPAN), "nccl", 64 << 20, 1)
        for _ in sync.stream(export(k)):
            pass
        syncs.append(sync)

    per_tensor = _best_of(timed, n) - _best_of(bare, n)
    t0 = time.perf_counter()
    for sync in syncs:
        sync.end()
    return max(0.0, per_tensor), (time.perf_counter() - t0) / len(syncs) * 1e6


def carry_us(n: int = 20000) -> float:
    """Per worker-group call on the trainer: put the traceparent into a KVBatchMeta and undo it."""
    from transfer_queue.metadata import KVBatchMeta

    from verl_otel.hooks.verl_batches import find_batch, put

    batch = KVBatchMeta(keys=[f"k{i}" for i in range(512)], tags=[{} for _ in range(512)])
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    def run(k: int) -> None:
        for _ in range(k):
            undo = put(find_batch((batch,), {}), tp)
            if undo is not None:
                undo()

    return _best_of(run, n)


def engine_carry_us(n: int = 20000) -> tuple[float, float | None]:
    """Per engine request (vLLM rollout with engine spans on): (agent-loop side: the sample's context made once
    per sample and put into a copy of the request's sampling params, through verl's real config object;
    server side: taken out of vLLM's real SamplingParams into trace_headers, None without vLLM installed)."""
    import asyncio

    from omegaconf import OmegaConf

    from verl_otel.hooks import engine, rollout

    class Client:  # the attribute verl's LLMServerClient reads: its real (OmegaConf) config
        config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "vllm"}}})

    client, parent = Client(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}

    async def agent_side(k: int) -> None:
        for _ in range(k):  # a new sample per request: the upper bound (multi-turn samples reuse their context)
            token = rollout._SAMPLE.set(rollout._SampleCtx(parent))
            engine._carried(client, {"sampling_params": params})
            rollout._SAMPLE.reset(token)

    client_us = _best_of(lambda k: asyncio.run(agent_side(k)), n)
    try:
        from vllm import SamplingParams
    except ImportError:
        return client_us, None
    token = rollout._SAMPLE.set(rollout._SampleCtx(parent))
    extra = engine._carried(client, {"sampling_params": params})["extra_args"]
    rollout._SAMPLE.reset(token)

    from types import SimpleNamespace

    from vllm.v1.engine.async_llm import AsyncLLM

    class Engine:  # what the hook reads of vLLM's AsyncLLM: generate's signature, whether tracing is on
        generate = AsyncLLM.generate
        observability_config = SimpleNamespace(otlp_traces_endpoint="verl-otel:in-process")

    eng = Engine()

    def server_side(k: int) -> None:
        for _ in range(k):
            sp = SamplingParams(max_tokens=16, extra_args=dict(extra))
            engine._trace_headers(eng, ("prompt", sp, "id"), {})

    def baseline(k: int) -> None:
        for _ in range(k):
            SamplingParams(max_tokens=16, extra_args=dict(extra))

    return client_us, max(0.0, _best_of(server_side, n // 4) - _best_of(baseline, n // 4))


def scrape_ms() -> float:
    from prometheus_client import CollectorRegistry, generate_latest

    from verl_otel.export.prometheus import StoreCollector
    from verl_otel.process.metrics import MetricStore
    from verl_otel.telemetry.rollout import RolloutTracker
    from verl_otel.telemetry.trainer_metrics import record_training_metrics

    store = MetricStore()
    tracker = RolloutTracker()
    tracker.batch_started("train", 1, 512, None)
    tracker.batch_started("validate", 1, 64, None)
    store.add_source(tracker.readings)
    record_training_metrics(store, {f"actor/metric_{i}": float(i) for i in range(300)})
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StoreCollector(store))
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        generate_latest(reg)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


if __name__ == "__main__":
    fg, bg = span_us()
    print(f"span_export_us {bg:.2f}")
    print(f"span_us {fg:.2f}")
    print(f"progress_update_us {progress_update_us():.3f}")
    print(f"scrape_ms {scrape_ms():.2f}")
    print(f"reward_record_us {reward_record_us():.3f}")
    print(f"carry_us {carry_us():.3f}")


def _stall_watch(root: str) -> Any:
    from opentelemetry import trace

    from verl_otel.config import StallSettings
    from verl_otel.export.stall_evidence import EvidenceFiles
    from verl_otel.process.metrics import MetricStore
    from verl_otel.process.stalls import StallWatch

    watch = StallWatch(
        StallSettings(),
        tracer=trace.NoOpTracer,
        store=MetricStore(),
        flush_soon=lambda: None,
        evidence=EvidenceFiles(__import__("pathlib").Path(root), py_spy=""),
        process_role=lambda: "bench",
    )
    return watch


def stall_watch_us(n: int = 200000) -> float:
    """Per watched call (a phase, a worker call, a reward call, a sample): the stall watch's enter + exit on the
    calling thread (a dict entry and its removal; the watchdog thread does the rest)."""
    with tempfile.TemporaryDirectory() as tmp:
        watch = _stall_watch(tmp)
        enter, exit_ = watch.enter, watch.exit

        def run(k: int) -> None:
            for _ in range(k):
                exit_(enter("reward"))

        try:
            return _best_of(run, n)
        finally:
            watch.stop()


def stall_dump_ms(repeats: int = 5) -> float:
    """Wall time of one stall's evidence on the watchdog thread: every thread's Python stack, the frame reading,
    the file (py-spy's native dump, when installed, is a subprocess on top: not counted here)."""
    import threading

    with tempfile.TemporaryDirectory() as tmp:
        watch = _stall_watch(tmp)
        gate = threading.Event()
        threads = [threading.Thread(target=gate.wait) for _ in range(8)]  # a process with some threads
        for th in threads:
            th.start()
        times = []
        try:
            for step in range(repeats):
                token = watch.enter("update_actor", step=step)
                t0 = time.perf_counter()
                watch.check(now=time.monotonic() + 10**6)
                times.append((time.perf_counter() - t0) * 1000)
                watch.exit(token)
        finally:
            gate.set()
            watch.stop()
        return min(times)
