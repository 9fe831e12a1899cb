"""Resident memory of every instrumented process (issue 28, part 4): read on the flusher's thread, at most every
few seconds, nothing where /proc is missing (the alert's promtool tests: deploy/prometheus/tests/)."""

import os
import threading
import time

import pytest

from verl_otel import runtime
from verl_otel import semconv as sc
from verl_otel.export.process_memory import ResidentMemory
from verl_otel.process.metrics import MetricStore


def _rss(store: MetricStore) -> float | None:
    return next((v for m, _, v in store.readings() if m is sc.PROCESS_RESIDENT_MEMORY), None)


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="Linux /proc only")
def test_reads_this_process_resident_memory_at_most_every_few_seconds(tmp_path):
    store = MetricStore()
    read = ResidentMemory(store, every_s=60.0)
    read()
    first = _rss(store)
    with open("/proc/self/status") as f:  # the kernel's own VmRSS, in kB
        vmrss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    assert first is not None and abs(first - vmrss) < 0.2 * vmrss
    fake = tmp_path / "statm"
    fake.write_text("100 7 3 1 0 5 0\n")
    read.statm = str(fake)
    read()  # within every_s: no new read
    assert _rss(store) == first
    read._next = 0.0
    read()
    assert _rss(store) == 7 * os.sysconf("SC_PAGE_SIZE")


def test_nothing_without_proc(tmp_path):
    store = MetricStore()
    ResidentMemory(store, statm=str(tmp_path / "missing"))()
    bad = tmp_path / "statm"
    bad.write_text("garbage")
    broken = ResidentMemory(store, statm=str(bad))
    broken()
    assert _rss(store) is None and broken.off


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="Linux /proc only")
def test_the_runtime_reads_it_on_the_flusher_thread(monkeypatch, tmp_path):
    seen: list[tuple[object, str]] = []  # (the reader's metric store, its thread): earlier runtimes' flushers tick too
    original = ResidentMemory.__call__

    def spy(self):
        original(self)
        seen.append((self.store, threading.current_thread().name))  # after the reading is set: the test reads it

    monkeypatch.setattr(ResidentMemory, "__call__", spy)
    monkeypatch.setenv(sc.ENV_DIR, str(tmp_path))
    runtime.reset_for_tests()
    try:
        rt = runtime.current()
        rt.wire(sc.PROCESS_ROLE_TRAINER)  # a process that exports metrics
        deadline = time.monotonic() + 5
        while not any(store is rt.store for store, _ in seen) and time.monotonic() < deadline:
            time.sleep(0.05)
        threads = [name for store, name in seen if store is rt.store]
        assert threads and threading.main_thread().name not in threads
        assert _rss(rt.store) is not None
    finally:
        runtime.reset_for_tests()
