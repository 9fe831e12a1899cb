"""The NVML sampler (export/gpu_sampler.py): off in one line without nvidia-ml-py (as on these CPU machines) or
without a visible GPU; with NVML, a process' own GPUs (CUDA_VISIBLE_DEVICES) read off-thread into bounded gauges.
No GPU was lent to these tests: the NVML module below is a fake, injected in place of nvidia-ml-py's ``pynvml``, the
one fake these tests use (real NVML is not verified here; docs/guides/goodput.md says so)."""

from __future__ import annotations

import logging
import sys
import time

import pytest

from helpers.fake_nvml import GIB, FakeNvml

from verl_otel import semconv as sc
from verl_otel.export import gpu_sampler as gs
from verl_otel.process.metrics import MetricStore


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


def test_busy_of_the_last_phase(store):
    """What a GPU process answers the trainer when a phase ends: the readings of the phase's last seconds from the
    ring; a phase shorter than the reading period, with no reading in it, read once now; nothing when off."""
    nvml = FakeNvml()
    sampler = gs.GpuSampler(store, nvml, every_s=3600, devices="1,3")  # 10% and 30%; the thread waits an hour
    assert sampler.start()  # its first reading: 20%
    time.sleep(0.05)
    nvml.util[1] = nvml.util[3] = 90
    sampler.sample_once()
    assert sampler.busy_last(0.02) == (pytest.approx(0.9), 2)  # the last reading only
    assert sampler.busy_last(3600) == (pytest.approx((0.2 + 0.9) / 2), 2)  # both
    time.sleep(0.05)
    nvml.util[1] = nvml.util[3] = 40
    before = len(sampler.samples)
    assert sampler.busy_last(0.01) == (pytest.approx(0.4), 2)  # no reading in it: read now, once
    assert len(sampler.samples) == before + 1
    sampler.stop()
    assert sampler.busy_last(3600) is None  # stopped: no answer
    assert gs.GpuSampler(store, nvml, devices="").busy_last(10) is None  # never started (off)


def test_a_question_answered_late_reads_its_phase(store):
    """The worker was inside its next call when the question came: the phase's stretch, not the last seconds."""
    nvml = FakeNvml()
    sampler = gs.GpuSampler(store, nvml, every_s=3600, devices="4")  # 40%
    assert sampler.start()  # the phase's reading
    time.sleep(0.6)
    nvml.util[4] = 0
    sampler.sample_once()  # 0%: the next call, after the phase
    assert sampler.busy_last(1.5, ago=0.3) == (pytest.approx(0.4), 1)  # the phase: up to 0.3 s ago
    assert sampler.busy_last(0.2) == (pytest.approx(0.0), 1)  # the last 0.2 s: the next call
    before = len(sampler.samples)
    assert sampler.busy_last(0.1, ago=5.0) is None and len(sampler.samples) == before  # late: no reading now
    sampler.stop()
