"""Scale of ``slow-steps --jaeger`` (bench/scale.py): a real Jaeger (the ``.stack-bin/jaeger`` that `make
stack-bin` builds, or one on PATH) with its memory storage on free 127.0.0.1 ports, the step traces of a long
run sent to its OTLP/HTTP port, and the reader run against it in a fresh process.

- :class:`MemoryJaeger`: start, :meth:`~MemoryJaeger.send`, stop; :func:`jaeger_binary` is None without one.
- :func:`load_run`: ``steps`` step traces of the shape bench/scale_readers.py writes to the file set (a trainer step
  with its phases, ``workers`` agent-loop workers each with its slowest ``rollout.sample`` spans, ``replicas``
  rollout servers' ``llm_request`` spans under them, a validation every 10th step), one export per step, the
  steps ``STEP_S`` apart and the last one an hour ago.
- :func:`reader_cost`: ``verl-otel slow-steps --jaeger`` in a fresh interpreter: wall seconds, peak resident MB
  (``getrusage`` maxrss) and the largest answer Jaeger sent it (bytes).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from verl_otel.native.configs import ConfigError, find_binary
from verl_otel.native.ports import Ports

ROOT = Path(__file__).resolve().parent.parent
STEP_S = 80  # a step's phases take 63 s (73 with validation): each step has its own stretch of time
_TIME = re.compile(rb'(TimeUnixNano":")(\d+)"')

_CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces: {{receivers: [otlp], processors: [batch], exporters: [jaeger_storage_exporter]}}
  telemetry: {{metrics: {{level: none}}}}
extensions:
  healthcheckv2: {{use_v2: true, http: {{endpoint: "127.0.0.1:{health}"}}}}
  jaeger_query:
    storage: {{traces: mem}}
    http: {{endpoint: "127.0.0.1:{ui}"}}
    grpc: {{endpoint: "127.0.0.1:{grpc}"}}
  jaeger_storage:
    backends: {{mem: {{memory: {{max_traces: {max_traces}}}}}}}
receivers:
  otlp: {{protocols: {{http: {{endpoint: "127.0.0.1:{otlp}"}}}}}}
processors:
  batch:
exporters:
  jaeger_storage_exporter: {{trace_storage: mem}}
"""


def jaeger_binary() -> Path | None:
    try:
        return find_binary("jaeger", None, ROOT)
    except ConfigError:
        return None


def _die_with_parent() -> None:
    """In the child before exec: Linux kills it when the bench dies, even by SIGKILL (a timed-out bench left its
    Jaeger running); elsewhere nothing."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class MemoryJaeger:
    """A real Jaeger v2 (all-in-one) with its memory storage, its query API at :attr:`url`."""

    def __init__(self, exe: Path, max_traces: int = 100_000) -> None:
        ports = Ports.free()
        self.url = f"http://127.0.0.1:{ports.jaeger_ui}"
        self.otlp = f"http://127.0.0.1:{ports.jaeger_otlp_http}/v1/traces"
        self.dir = Path(tempfile.mkdtemp(prefix="verl-otel-jaeger-"))
        config = self.dir / "jaeger.yaml"
        config.write_text(
            _CONFIG.format(
                health=ports.jaeger_health,
                ui=ports.jaeger_ui,
                grpc=ports.jaeger_grpc,
                otlp=ports.jaeger_otlp_http,
                max_traces=max_traces,
            )
        )
        self.log = open(self.dir / "jaeger.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(exe), f"--config={config}"], stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
        )
        health = f"http://127.0.0.1:{ports.jaeger_health}/status"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(health, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Jaeger did not start: {(self.dir / 'jaeger.log').read_text()[-2000:]}")
            time.sleep(0.2)

    def send(self, body: bytes) -> None:
        """One OTLP/JSON ExportTraceServiceRequest to its OTLP/HTTP receiver."""
        req = urllib.request.Request(self.otlp, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            resp.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _merged(lines: bytes) -> bytes:
    """One step's export lines (one per process) as one request."""
    docs = [json.loads(line) for line in lines.splitlines() if line.strip()]
    return json.dumps(
        {"resourceSpans": [rs for d in docs for rs in d["resourceSpans"]]}, separators=(",", ":")
    ).encode()


def load_run(jaeger: MemoryJaeger, steps: int, workers: int = 128, samples: int = 8, replicas: int = 16) -> int:
    """``steps`` step traces sent to ``jaeger``, each found by its search when this returns; bytes sent."""
    import scale_readers as readers

    built = time.time_ns() - 3600 * 10**9  # the templates' times start an hour before they are made
    plain = _merged(readers._template(workers, samples, 1, replicas, False))
    val = _merged(readers._template(workers, samples, 1, replicas, True))
    total = 0
    for step in range(1, steps + 1):
        shift = (step - steps) * STEP_S * 10**9  # the template's times are an hour ago: the last step's
        data = readers.step_data(val if step % 10 == 0 else plain, step)
        data = _TIME.sub(lambda m, shift=shift: m[1] + str(int(m[2]) + shift).encode() + b'"', data)
        jaeger.send(data)
        total += len(data)
    _wait_stored(jaeger, steps, (built - 10**9, time.time_ns() - 3600 * 10**9 + 10**9))
    return total


def _wait_stored(jaeger: MemoryJaeger, steps: int, last: tuple[int, int], timeout_s: float = 300) -> None:
    """Until Jaeger's search finds the last step sent, which started within ``last`` (ns); its receiver, batch
    processor and storage take the exports in order, and the reader's count of steps then checks that every
    one was there."""
    from verl_otel.analysis.jaeger import JaegerClient

    client, want = JaegerClient(jaeger.url), f"{steps:032x}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(s.trace_id == want for s in client.find_steps("verl", *last, limit=10)):
            return
        time.sleep(0.5)
    raise RuntimeError(f"Jaeger did not store step {steps} in {timeout_s}s")


_READER = """
import os, resource, sys, time
from verl_otel.analysis import jaeger
clients = []
init = jaeger.JaegerClient.__init__
def remember(self, *args, **kwargs):  # measurement only: the answers' sizes each client saw
    init(self, *args, **kwargs)
    clients.append(self)
jaeger.JaegerClient.__init__ = remember
import io, re
from verl_otel.cli.main import main
sys.stdout = io.StringIO()
t = time.perf_counter()
rc = main(sys.argv[1:])
seconds, largest = time.perf_counter() - t, max(c.largest_bytes for c in clients)
compared = re.search(r" of (\\d+) steps? ", sys.stdout.getvalue())
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(rc, seconds, rss, largest, compared[1] if compared else 0, file=sys.stderr)
"""


def reader_cost(url: str, since: str = "2d") -> tuple[float, float, int, int]:
    """(seconds, peak resident MB, largest answer's bytes, steps compared) of ``verl-otel slow-steps --jaeger``."""
    out = subprocess.run(
        [sys.executable, "-c", _READER, "slow-steps", "--jaeger", url, "--since", since],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    rc, seconds, rss, largest, compared = out.stderr.strip().splitlines()[-1].split()
    if rc != "0":
        raise SystemExit(f"slow-steps --jaeger failed: {out.stderr[-2000:]}")
    return float(seconds), float(rss), int(largest), int(compared)
