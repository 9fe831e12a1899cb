"""The NVML sampler (export/gpu_sampler.py): off in one line without nvidia-ml-py (as on these CPU machines) or
without a visible GPU; with NVML, a process' own GPUs (CUDA_VISIBLE_DEVICES) read off-thread into bounded gauges.
No GPU was lent to these tests: the NVML module below is a fake, injected in place of nvidia-ml-py's ``pynvml``, the
one fake these tests use (real NVML is not verified here; docs/guides/goodput.md says so)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from verl_otel import semconv as sc
from verl_otel.export import gpu_sampler as gs
from verl_otel.process.metrics import MetricStore

GIB = 2**30


class FakeNvml:
    """nvidia-ml-py's calls the sampler makes, over a node of 8 GPUs whose utilization the test sets."""

    def __init__(self, count: int = 8, fail_init: bool = False) -> None:
        self.count, self.fail_init = count, fail_init
        self.util = {i: 10 * i for i in range(count)}
        self.inits = self.shutdowns = 0
        self.threads: set[str] = set()  # the threads that read a GPU
        self.broken: set[int] = set()

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's names
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        if not 0 <= i < self.count:
            raise ValueError(f"no GPU {i}")
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:  # noqa: N802
        return int(uuid.rsplit("-", 1)[1])

    def nvmlDeviceGetIndex(self, handle: int) -> int:  # noqa: N802
        return handle

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:  # noqa: N802
        self.threads.add(threading.current_thread().name)
        if handle in self.broken:
            raise RuntimeError("GPU is lost")
        return SimpleNamespace(gpu=self.util[handle], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(used=(handle + 1) * GIB, total=80 * GIB, free=0)


def _gauges(store: MetricStore, metric: sc.MetricDef) -> dict[str, float]:
    return {labels[0]: v for m, labels, v in store.readings() if m == metric}


@pytest.fixture
def store():
    return MetricStore()


def test_off_in_one_line_without_nvidia_ml_py(store, caplog, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as on a machine without nvidia-ml-py
    with caplog.at_level(logging.INFO, logger="verl_otel"):
        assert gs.start_for(sc.PROCESS_ROLE_WORKER, store) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "GPU sampling is off" in lines[0] and "nvidia-ml-py is not installed" in lines[0]
    assert not _gauges(store, sc.GPU_UTILIZATION)


def test_off_without_a_driver_or_a_visible_gpu(store, caplog):
    with caplog.at_level(logging.INFO, logger="verl_otel"):
        assert not gs.GpuSampler(store, FakeNvml(fail_init=True), devices="0").start()
        assert not gs.GpuSampler(store, FakeNvml(), devices="").start()
        assert not gs.GpuSampler(store, FakeNvml(), devices="-1").start()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and "NVML could not start (NVML Shared Library Not Found)" in lines[0]
    assert all("CUDA_VISIBLE_DEVICES names no GPU" in line for line in lines[1:])


def test_process_roles_without_gpus_start_nothing(store, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    for process_role in (sc.PROCESS_ROLE_TRAINER, sc.PROCESS_ROLE_AGENT_LOOP, sc.PROCESS_ROLE_REWARD):
        assert gs.start_for(process_role, store) is None
    assert not _gauges(store, sc.GPU_UTILIZATION)


def test_reads_its_own_gpus_off_thread(store, monkeypatch):
    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)  # as nvidia-ml-py would be imported
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-uuid-5")  # Ray's per-worker GPUs: an index and a UUID
    monkeypatch.setattr(gs, "READ_EVERY_S", 0.02)
    sampler = gs.GpuSampler(store, every_s=0.02)
    assert sampler.start()
    try:
        deadline = time.monotonic() + 5
        while "verl-otel-gpu" not in nvml.threads and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "verl-otel-gpu" in nvml.threads  # read on the sampler's own thread, not the caller's
        assert _gauges(store, sc.GPU_UTILIZATION) == {"2": 0.2, "5": 0.5}  # only its own, by NVML index
        assert _gauges(store, sc.GPU_MEMORY_USED) == {"2": 3 * GIB, "5": 6 * GIB}
        assert _gauges(store, sc.GPU_MEMORY_TOTAL) == {"2": 80 * GIB, "5": 80 * GIB}
        nvml.util[2] = 100
        deadline = time.monotonic() + 5
        while _gauges(store, sc.GPU_UTILIZATION)["2"] != 1.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _gauges(store, sc.GPU_UTILIZATION)["2"] == 1.0  # it keeps reading
    finally:
        sampler.stop()
    assert nvml.shutdowns == 1 and not sampler._thread.is_alive()


def test_bounded_and_a_lost_gpu_does_not_stop_the_others(store):
    nvml = FakeNvml(count=40)
    sampler = gs.GpuSampler(store, nvml, devices=None)
    sampler._devices = None  # unset: every GPU of the node, at most MAX_GPUS
    assert sampler.start()
    sampler.stop()
    assert len(sampler.samples) == 1 and len(_gauges(store, sc.GPU_UTILIZATION)) == gs.MAX_GPUS
    sampler = gs.GpuSampler(store, nvml, devices="0,1,99")  # 99: NVML knows no such GPU, left out
    assert sampler.start()
    assert [label for label, _ in sampler.gpus] == ["0", "1"]
    nvml.broken.add(1)
    assert sampler.sample_once() == 1 and sampler.errors == 1
    for _ in range(gs.KEEP_SAMPLES + 5):
        sampler.sample_once()
    assert len(sampler.samples) == gs.KEEP_SAMPLES  # bounded
    sampler.stop()


def test_busy_share_of_a_stretch(store):
    nvml = FakeNvml()
    sampler = gs.GpuSampler(store, nvml, every_s=3600, devices="3,4")  # 30% and 40%; its thread waits an hour
    assert sampler.start()  # its first sample
    t0 = time.monotonic()
    nvml.util[3] = nvml.util[4] = 100
    sampler.sample_once()
    sampler.stop()
    assert sampler.busy_share(t0, time.monotonic()) == pytest.approx(1.0)
    assert sampler.busy_share(0, time.monotonic()) == pytest.approx((0.35 + 1.0) / 2)
    assert sampler.busy_share(time.monotonic() + 1, time.monotonic() + 2) is None
