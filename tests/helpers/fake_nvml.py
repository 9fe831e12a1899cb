"""A stand-in for nvidia-ml-py's ``pynvml``: the calls export/gpu_sampler.py makes, over a node of GPUs whose
utilization a test sets. No GPU was lent to these tests: this is the one fake they use, injected in place of
``pynvml`` (tests/test_gpu_sampler.py in-process, tests/test_gpu_busy_ray.py inside real Ray actors)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

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
