"""The measured busy share's data path with real Ray (hooks/goodput.py::RayGpuBusy): GPU processes (Ray actors
whose runtime, wired as a training worker, starts its NVML sampler) are asked through ``__ray_call__`` as each of
the trainer's GPU phases ends, and the trainer's step end joins the answers into the step span's buckets without
waiting: weighted by each process' GPUs, absent (not 0) for a phase whose processes read nothing or whose answers
are not in yet, and asked no more once no process reads its GPUs. No GPU was lent to these tests: inside each actor
the NVML module is tests/helpers/fake_nvml.py's, in place of nvidia-ml-py's ``pynvml``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from helpers.ray import ray_init
from helpers.trainer_steps import trainer_steps

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel.analysis.otlp_json import read_file
from verl_otel.analysis.step_traces import build_steps
from verl_otel.hooks.goodput import RayGpuBusy, watch_gpu_busy

TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def ray_session():  # one Ray for the module's tests
    import ray

    ray_init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def _gpu_process(ray: Any, tmp_path: Path, util: dict[int, int], devices: str) -> Any:
    """A Ray actor wired as a training worker whose ``devices`` (CUDA_VISIBLE_DEVICES) run at ``util`` percent."""

    class GpuProcess:  # local: Ray pickles it by value
        def __init__(self) -> None:
            import sys

            from helpers.fake_nvml import FakeNvml

            self.nvml = FakeNvml()
            self.nvml.util.update(util)
            sys.modules["pynvml"] = self.nvml  # in place of nvidia-ml-py
            os.environ["CUDA_VISIBLE_DEVICES"] = devices  # as Ray sets it for a GPU actor
            trackers.current().wire(sc.PROCESS_ROLE_WORKER)  # its runtime starts the sampler, as in a training worker

        def sampling(self) -> bool:
            return getattr(trackers.current().runtime, "gpus", None) is not None

        def hold(self, seconds: float) -> None:  # a long worker call: a question waits behind it
            time.sleep(seconds)

    env = {
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
        sc.ENV_DIR: str(tmp_path / "workers"),
    }
    return ray.remote(GpuProcess).options(num_cpus=0, runtime_env={"env_vars": env}).remote()


def _in(ray: Any, busy: RayGpuBusy, step: int) -> None:
    """The test waits for the answers (the trainer never does: it reads what is in at the step's end)."""
    refs = [r for _, _, refs in busy._asked.get(step, []) for r in refs]
    ray.wait(refs, num_returns=len(refs), timeout=120)


def test_the_step_span_carries_its_gpus_measured_busy_share(tmp_path, monkeypatch, ray_session):
    ray = ray_session
    actor_a = _gpu_process(ray, tmp_path, {0: 90, 1: 70}, "0,1")  # two GPUs: 80% busy
    actor_b = _gpu_process(ray, tmp_path, {2: 20}, "2")  # one GPU: 20%
    rollout = _gpu_process(ray, tmp_path, {3: 50}, "3")  # a rollout replica's process
    cpu_only = _gpu_process(ray, tmp_path, {}, "")  # no GPU visible: its sampler is off
    assert ray.get([p.sampling.remote() for p in (actor_a, actor_b, rollout, cpu_only)], timeout=180) == [
        True,
        True,
        True,
        False,
    ]
    trainer = SimpleNamespace(  # verl's trainer, as hooks/verl_objects.py::gpu_processes reads it
        actor_rollout_wg=SimpleNamespace(workers=[actor_a, actor_b]),
        ref_policy_wg=SimpleNamespace(workers=[cpu_only, object()]),  # object(): no __ray_call__, skipped
        llm_server_manager=SimpleNamespace(
            rollout_replicas=[SimpleNamespace(servers=[rollout], workers=[rollout])]  # hybrid: the same process
        ),
    )
    with trainer_steps(tmp_path, monkeypatch, 2) as (m, number):
        tracer = m.steps
        watch_gpu_busy(m, trainer)
        busy = tracer.gpu_busy
        assert isinstance(busy, RayGpuBusy)
        ends = []
        for step in (1, 2):
            number[0] = step
            tracer.phase_enter(sc.VERL_TIMER_STEP)
            for timer in ("gen", "old_log_prob", "ref"):
                tracer.phase_exit(tracer.phase_enter(timer), None)
            if step == 2:  # actor_b is inside a long call when update_actor's question comes: not in at step end
                actor_b.hold.remote(3.0)
                time.sleep(0.2)
            tracer.phase_exit(tracer.phase_enter("update_actor"), None)
            if step == 1:
                _in(ray, busy, step)
            else:
                time.sleep(0.5)  # the other answers are in
            t0 = time.monotonic()
            tracer.metrics_logged({"training/global_step": step}, step)
            ends.append(time.monotonic() - t0)
    assert max(ends) < 1.0, ends  # the step end never waited for actor_b's 3 s call
    steps = {s.global_step: s.attributes for s in build_steps(read_file(tmp_path / sc.TRACES_FILE).spans)}
    one, two = steps[1], steps[2]
    assert one[sc.busy_attr("update_actor")] == pytest.approx((0.8 * 2 + 0.2) / 3)  # weighted by the GPUs
    assert one[sc.busy_attr("old_log_prob")] == pytest.approx(0.6)
    assert one[sc.busy_attr("generating")] == pytest.approx(0.5)  # the rollout's process, asked once
    assert sc.busy_attr("ref") not in one  # its processes read no GPU: absent, not 0
    assert sc.busy_attr("update_actor") not in two and two[sc.busy_attr("old_log_prob")] == pytest.approx(0.6)
    assert not busy.off and not busy._asked  # every step's questions read (or dropped) at its end


def test_no_process_reads_its_gpus_asking_stops(ray_session, tmp_path, otel_log):
    ray = ray_session
    cpu_only = _gpu_process(ray, tmp_path, {}, "")
    busy = RayGpuBusy(lambda phase: [cpu_only])
    for step in (1, 2, 3):  # step 3's question is out before steps 1 and 2 are read
        busy.on_phase_end(sc.PHASE_UPDATE_ACTOR, step, 1.0, "")
        busy.on_phase_end(sc.PHASE_UPDATE_WEIGHTS, step, 1.0, "")  # no GPU phase: never asked
        assert [phase for phase, _, _ in busy._asked[step]] == [sc.PHASE_UPDATE_ACTOR]
        _in(ray, busy, step)
    assert busy.shares(1) is None and not busy.off
    assert busy.shares(2) is None and busy.off  # two steps in which no process read its GPUs
    assert busy.shares(3) is None and not busy._asked  # dropped unread
    busy.on_phase_end(sc.PHASE_UPDATE_ACTOR, 4, 1.0, "")
    assert not busy._asked  # asked no more
    said = [line for line in otel_log.messages() if "no GPU process measures its GPUs" in line]
    assert len(said) == 1, otel_log.messages()
