"""The v1 run of tests/test_e2e_multihost.py: 2 steps of verl's v1 trainer across the namespaced hosts, with
the Collector as users deploy it across hosts (helpers/hosts_stack.py: Jaeger and the gateway on A, an agent on
B; the driver's loopback OTLP endpoint reaches each host's own) and ONE ``VERL_OTEL_DIR`` seen by both hosts: a
folder bound onto ``/tmp/shared`` in each, as an NFS mount would be. Metrics are pulled (``/metrics`` of every
process, listed in that one shared ``prometheus_targets.json``).

While it runs: the agent on B is SIGKILLed once step 1 is in Jaeger and started again ``OUTAGE_S`` later (step
2's spans of B's processes are made while it is down); once step 2 is in Jaeger (the run lingers) the shared
targets file is read a few times."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from helpers.hosts import Host
from helpers.hosts_ray import RayCluster, host_env
from helpers.hosts_stack import HostStack

from verl_otel import semconv as sc
from verl_otel.analysis.jaeger import JaegerClient
from verl_otel.analysis.step_traces import Span

SHARED = "/tmp/shared"  # inside every host: the one shared VERL_OTEL_DIR (and the demo's --out)
STEPS = 2
HANG = "update_actor@2=12"  # in each training worker, so on both hosts: two hosts' evidence of one phase
LINGER_S = 25
OUTAGE_S = 20  # the agent on B is down this long
STALL_ENV = {sc.ENV_STALL_SECONDS: "8", sc.ENV_STALL_MIN_SECONDS: "3", sc.ENV_STALL_FACTOR: "3"}
VERL_OTEL = [sys.executable, "-m", "verl_otel.cli.main"]


@dataclass
class Outage:
    killed: float | None = None  # time.time() of the agent's SIGKILL
    restarted: float | None = None
    errors: list[str] = field(default_factory=list)


@dataclass
class V1Run:
    a: Host
    b: Host
    stack: HostStack
    shared: Path  # the shared folder, seen from here
    rc: int
    log: str
    outage: Outage
    targets: list[list[dict] | None]  # the shared targets file, read while the run lingered
    answers: dict[str, subprocess.CompletedProcess] = field(default_factory=dict)

    def failure(self) -> str:
        demo_log = self.shared / "demo.log"
        tail = demo_log.read_text(errors="replace")[-6000:] if demo_log.exists() else ""
        return f"{self.log[-3000:]}\n{tail}\n{self.stack.logs()}"

    def jaeger_spans(self) -> list[Span]:
        return jaeger_spans(self.stack)


def jaeger_spans(stack: HostStack) -> list[Span]:
    """Every span of the run's traces in Jaeger on A, each once ([] while Jaeger cannot be reached)."""
    now = time.time_ns()
    try:
        spans = JaegerClient(stack.jaeger_url, timeout_s=10).find_traces(
            sc.SERVICE_NAME_DEFAULT, now - 3600 * 10**9, now + 60 * 10**9, operation="", limit=1000
        )
    except OSError:
        return []
    return list({s.span_id: s for s in spans}.values())


def _steps_seen(stack: HostStack) -> set[int]:
    return {int(s.attributes.get(sc.ATTR_GLOBAL_STEP, -1)) for s in jaeger_spans(stack) if s.name == sc.SPAN_STEP}


def share(hosts: list[Host], source: Path) -> None:
    """``source`` (outside /tmp: every host sees it) bound onto SHARED in each host's own mount namespace."""
    for host in hosts:
        host.run(["sh", "-c", f"mkdir -p {SHARED} && mount --bind {source} {SHARED}"], host_env())


def _read_targets(path: Path) -> list[dict] | None:
    try:
        return list(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _probe(run: V1Run, proc: subprocess.Popen) -> None:
    """Until the run ends: the agent's outage, then the shared targets file once step 2 is in Jaeger."""
    o, deadline = run.outage, time.monotonic() + 540
    while proc.poll() is None and time.monotonic() < deadline:
        seen = _steps_seen(run.stack)
        try:
            if o.killed is None and 1 in seen:
                run.stack.parts["agent"].kill()
                o.killed = time.time()
            elif o.killed is not None and o.restarted is None and time.time() - o.killed >= OUTAGE_S:
                run.stack.start("agent")  # the same queue folder and ports
                o.restarted = time.time()
        except Exception as err:  # noqa: BLE001 - recorded and asserted on; the run goes on
            o.errors.append(repr(err))
        if STEPS in seen and not run.targets and o.restarted is not None:
            for _ in range(5):  # every process of both hosts writes this one file: read it a few times
                run.targets.append(_read_targets(run.shared / sc.PROM_TARGETS_FILE))
                time.sleep(1)
        time.sleep(2)
    if o.killed is not None and o.restarted is None:  # the run ended first: bring the agent back all the same
        run.stack.start("agent")
        o.restarted = time.time()


@contextlib.contextmanager
def v1_run(cluster: RayCluster, state: Path, bins: dict[str, Path]) -> Iterator[V1Run]:
    a, b = cluster.hosts[0], cluster.hosts[1]
    shared = state / "shared"
    shared.mkdir(parents=True)
    share([a, b], shared)  # the model and data too: the demo builds them there, B reads them
    stack = HostStack(a, b, state, bins)
    try:
        stack.up()
        env = host_env(
            **STALL_ENV,
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=stack.otlp_endpoint,  # loopback: each host's own Collector
            **{sc.ENV_PROM_PORT: "0"},  # and metrics pulled: every process in the shared targets file
        )
        cmd = [*VERL_OTEL, "demo", "--trainer", "v1", "--steps", str(STEPS), "--out", SHARED, "--hang", HANG,
               "--ray-address", cluster.address, "--nnodes", "2", "--linger", str(LINGER_S)]  # fmt: skip
        out_path = a.outside("/tmp/demo-v1.out")
        with open(out_path, "w") as out:
            proc = a.popen(cmd, env, stdout=out, stderr=subprocess.STDOUT)
        run = V1Run(a, b, stack, shared, -1, "", Outage(), [])
        try:
            _probe(run, proc)
            run.rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        run.log = out_path.read_text(errors="replace")
        run.answers["doctor"] = a.run([*VERL_OTEL, "doctor", "--dir", SHARED, "--json"], host_env(), check=False)
        yield run
    finally:
        stack.down()
