"""One real vLLM demo run (tests/test_e2e_real_stack_vllm.py) pushed to the real Collector, which exports to
the real Jaeger: the v1 trainer, 2 steps, with only OTEL_EXPORTER_OTLP_ENDPOINT set for telemetry. Only the
Collector and Jaeger are started (verl_otel.native, free ports); the vLLM server's `llm_request` spans reach
Jaeger through the same Collector as the trainer's and the agent-loop workers' spans."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from helpers.procs import ROOT, clean_env
from helpers.real_stack import go_binaries
from helpers.verl_runs import vllm_demo_cmd, vllm_python

from verl_otel.native import Binds, Ports, Stack, down

STEPS = 2
RUN_TIMEOUT_S = 420


@dataclass
class VllmStackRun:
    stack: Stack
    out: Path
    rc: int
    seconds: float
    started_ns: int

    def log_tail(self, n: int = 4000) -> str:
        return (self.out / "demo.log").read_text(errors="replace")[-n:]


def start(tmp: Path) -> VllmStackRun:
    """Skips without .venv-vllm, and without Go (fails under CI=true), as the vLLM and real-stack tests do."""
    vllm_python()
    binaries = go_binaries()
    stack = Stack((tmp / "state").absolute(), Ports.free(), Binds())
    try:
        for name in ("jaeger", "collector"):  # the order data flows backwards, as `up` starts them
            stack.start(name, ROOT, binaries, timeout_s=120)
        out = tmp / "demo"
        out.mkdir(parents=True, exist_ok=True)
        env = {**clean_env(), "OTEL_EXPORTER_OTLP_ENDPOINT": stack.otlp_endpoint}
        started_ns, t0 = time.time_ns(), time.monotonic()
        proc = subprocess.run(
            vllm_demo_cmd(out, "--steps", str(STEPS)),
            env=env,
            cwd=out,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        run = VllmStackRun(stack, out, proc.returncode, time.monotonic() - t0, started_ns)
    except BaseException:
        down(stack.state)
        raise
    print(
        f"\n[test_e2e_real_stack_vllm] real vLLM demo ({STEPS} steps) pushing to the real Collector: {run.seconds:.0f}s"
    )
    return run
