"""A real vLLM demo run (tests/test_e2e_vllm_async.py's separate_async one) pushed to the real Collector, which
exports to the real Jaeger, with only OTEL_EXPORTER_OTLP_ENDPOINT set for telemetry. Only the Collector and Jaeger
are started (verl_otel.native, free ports); the vLLM server's `llm_request` spans reach Jaeger through the same
Collector as the trainer's and the agent-loop workers' spans."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from helpers.procs import ROOT, clean_env
from helpers.real_stack import go_binaries
from helpers.verl_runs import vllm_demo_cmd, vllm_python

from verl_otel import semconv as sc
from verl_otel.analysis.jaeger import JaegerClient
from verl_otel.native import Binds, Ports, Stack, down


@dataclass
class VllmStackRun:
    stack: Stack
    out: Path
    rc: int
    seconds: float
    started_ns: int

    def jaeger_spans(self) -> list:
        """Every span of the service's traces in Jaeger (/api/v3; an empty operation selects all), each once."""
        client = JaegerClient(self.stack.jaeger_url)
        spans = client.find_traces(sc.SERVICE_NAME_DEFAULT, self.started_ns - 60 * 10**9, time.time_ns(), operation="")
        assert client.api == "v3", client.api
        return list({s.span_id: s for s in spans}.values())


def start(tmp: Path, args: list[str], timeout_s: float) -> VllmStackRun:
    """`verl-otel demo --rollout vllm ARGS` pushing to a fresh Collector and Jaeger; the caller stops them
    (``down(run.stack.state)``). Skips without .venv-vllm, and without Go (fails under CI=true)."""
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
            vllm_demo_cmd(out, *args),
            env=env,
            cwd=out,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=False,
        )
        return VllmStackRun(stack, out, proc.returncode, time.monotonic() - t0, started_ns)
    except BaseException:
        down(stack.state)
        raise
