"""This process' own GPUs, measured: utilization and memory per GPU through NVML (``nvidia-ml-py``, an optional
import), read by one daemon thread of the process every few seconds, never on a training thread, into gauges
(``verl_gpu_utilization_ratio``, ``verl_gpu_memory_used_bytes``/``_total_bytes``). Its own GPUs are the ones
``CUDA_VISIBLE_DEVICES`` names (indices or UUIDs, as Ray sets them per worker), at most :data:`MAX_GPUS`. Without
nvidia-ml-py, a driver or a visible GPU it is off, said in one line. The last hour of samples is kept (bounded) so
that the GPU-time accounting can ask for the measured busy share of a stretch (:meth:`GpuSampler.busy_share`): the
trainer asks each GPU process, through Ray, for that of a phase that just ended (:meth:`GpuSampler.busy_last`,
hooks/goodput.py::RayGpuBusy)."""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import time
from collections import deque
from types import ModuleType
from typing import Any

from verl_otel import semconv as sc
from verl_otel._log import logger
from verl_otel.process.metrics import MetricStore

READ_EVERY_S = 2.0
MAX_GPUS = 16  # a node's GPUs: more than any process is given
KEEP_SAMPLES = 1800  # one hour at READ_EVERY_S: busy_share's window, bounded
PROMPT_S = 0.5  # a phase's question answered within this of its end may read the GPUs now (busy_last)
#: the processes that hold GPUs: training workers, rollout servers (vLLM), a standalone replica's worker
GPU_PROCESS_ROLES = frozenset((sc.PROCESS_ROLE_WORKER, sc.PROCESS_ROLE_ROLLOUT_SERVER, sc.PROCESS_ROLE_REPLICA_WORKER))


def load_nvml() -> ModuleType | str:
    """nvidia-ml-py's module, or why not (one line)."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"


def visible(env: str | None) -> list[str] | None:
    """The devices ``CUDA_VISIBLE_DEVICES`` names (None: unset, every GPU of the node)."""
    if env is None:
        return None
    names = [d.strip() for d in env.split(",") if d.strip()]
    out = []
    for name in names:
        if name.lstrip("-").isdigit() and int(name) < 0:
            break  # CUDA stops at the first invalid index
        out.append(name)
    return out


class GpuSampler:
    """One reader per process: :meth:`start` opens NVML and its GPUs and starts the thread, or says in one line why
    it is off. ``nvml`` is the module to use (default: nvidia-ml-py's ``pynvml``)."""

    def __init__(
        self,
        store: MetricStore,
        nvml: ModuleType | None = None,
        every_s: float = READ_EVERY_S,
        devices: str | None = None,
    ) -> None:
        self.store, self.every_s, self._nvml = store, every_s, nvml
        self._devices = os.environ.get("CUDA_VISIBLE_DEVICES") if devices is None else devices
        self.gpus: list[tuple[str, Any]] = []  # (label: the NVML index, handle)
        self.off: str | None = None  # why it is off, once decided
        self.samples: deque[tuple[float, float]] = deque(maxlen=KEEP_SAMPLES)  # (monotonic, mean utilization)
        self.errors = 0
        self._reading = threading.Lock()  # one reading at a time: the thread's, or a short phase's (busy_last)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Open NVML and this process' GPUs and start sampling; False (and one line naming why) when it is off."""
        try:
            self.off = self._open()
        except Exception as exc:  # noqa: BLE001 - NVML's own errors (no driver, no device): off, never raise
            self.off = f"NVML could not start ({exc})"
        if self.off is not None:
            logger.info("GPU sampling is off in pid %s: %s; only the span-based accounting runs", os.getpid(), self.off)
            return False
        self.sample_once()
        self._thread = threading.Thread(target=self._run, name="verl-otel-gpu", daemon=True)
        self._thread.start()
        return True

    def _open(self) -> str | None:
        if self._nvml is None:
            got = load_nvml()
            if isinstance(got, str):
                return got
            self._nvml = got
        nvml = self._nvml
        wanted = visible(self._devices)
        if wanted is not None and not wanted:
            return "CUDA_VISIBLE_DEVICES names no GPU"
        nvml.nvmlInit()
        if wanted is None:
            wanted = [str(i) for i in range(min(MAX_GPUS, int(nvml.nvmlDeviceGetCount())))]
        for name in wanted[:MAX_GPUS]:
            try:
                if name.isdigit():
                    handle = nvml.nvmlDeviceGetHandleByIndex(int(name))
                else:
                    handle = nvml.nvmlDeviceGetHandleByUUID(name)
                self.gpus.append((str(nvml.nvmlDeviceGetIndex(handle)), handle))
            except Exception as exc:  # noqa: BLE001 - a device NVML does not know: the others are read
                logger.info("GPU %s is not readable through NVML (%s): left out", name, exc)
        if not self.gpus:
            nvml.nvmlShutdown()
            return "no GPU of this process is readable through NVML"
        return None

    def sample_once(self, wait: bool = True) -> int:
        """Read every GPU once into the gauges; how many were read (0, without ``wait``, while another reads)."""
        if not self._reading.acquire(blocking=wait):
            return 0
        try:
            return self._read_all()
        finally:
            self._reading.release()

    def _read_all(self) -> int:
        nvml, read, busy = self._nvml, 0, 0.0
        for label, handle in self.gpus:
            try:
                util = nvml.nvmlDeviceGetUtilizationRates(handle)  # type: ignore[union-attr]
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)  # type: ignore[union-attr]
            except Exception:  # noqa: BLE001 - a GPU gone (Xid, reset): counted, the others go on
                self.errors += 1
                continue
            ratio = max(0.0, min(1.0, float(util.gpu) / 100.0))
            self.store.set(sc.GPU_UTILIZATION, (label,), ratio)
            self.store.set(sc.GPU_MEMORY_USED, (label,), float(mem.used))
            self.store.set(sc.GPU_MEMORY_TOTAL, (label,), float(mem.total))
            read, busy = read + 1, busy + ratio
        if read:
            self.samples.append((time.monotonic(), busy / read))
        return read

    def busy_share(self, start: float, end: float) -> float | None:
        """The mean measured utilization of this process' GPUs between two ``time.monotonic()`` readings (None: no
        sample in it)."""
        got = [u for t, u in list(self.samples) if start <= t <= end]
        return sum(got) / len(got) if got else None

    def busy_last(self, seconds: float, ago: float = 0.0) -> tuple[float, int] | None:
        """(the busy share, the GPUs read) of the ``seconds`` that ended ``ago`` seconds before now: a phase that
        ended, asked for by the trainer (``ago``: how long its question took to be answered, as a worker inside
        its next call answers late). A phase with no reading in it, asked for at once (a phase shorter than the
        reading period), is read once now (NVML's utilization is of its own last sample period, at most a second:
        the phase's end). None: off, stopped, or nothing read."""
        gpus = len(self.gpus)
        if not gpus or self._stop.is_set():
            return None
        ago = max(0.0, float(ago))
        end = time.monotonic() - ago
        start = end - max(0.0, min(float(seconds), KEEP_SAMPLES * self.every_s))
        share = self.busy_share(start, end)
        if share is None and ago < PROMPT_S and self.sample_once(wait=False):
            share = self.busy_share(start, time.monotonic())
        return None if share is None else (share, gpus)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.sample_once()
            except Exception:  # noqa: BLE001 - the thread never dies of a reading
                self.errors += 1

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if not self._reading.acquire(timeout=timeout_s):  # a reading that hangs (a GPU gone): NVML left open
            return
        try:
            if self._nvml is not None and self.gpus:
                with contextlib.suppress(Exception):
                    self._nvml.nvmlShutdown()
                self.gpus = []
        finally:
            self._reading.release()


def start_for(process_role: str, store: MetricStore) -> GpuSampler | None:
    """A running sampler for a process of ``process_role`` that holds GPUs; None for the others or where it is off."""
    if process_role not in GPU_PROCESS_ROLES:
        return None
    sampler = GpuSampler(store)
    return sampler if sampler.start() else None
