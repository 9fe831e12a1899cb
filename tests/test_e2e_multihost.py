"""verl-otel across real hosts on one machine (issue 34): two hosts made of Linux namespaces (helpers/hosts.py:
own hostname, address, /tmp, PID space), a real Ray cluster across them (head on host A, a worker node on B), and
ONE real verl run (legacy trainer, 2 steps, the embedded default: no Collector, no shared filesystem) whose driver
runs on A and whose training workers (ranks 0 and 1, gloo across the hosts) and agent-loop workers run on both
(``verl-otel demo --ray-address A --nnodes 2``). Every assert of this module reads that one run
(``multihost_run``: what the commands on A answered while it lingered and after it, each host's files) or the
cluster under it (``cluster``).

Each host's VERL_OTEL_DIR is the same path, ``/tmp/demo``, on that host's own /tmp: the run's data is split over
the hosts as on real machines without a shared filesystem (``Host.outside`` reads one host's).

Then ONE v1 run on the same cluster (``multihost_v1``, helpers/multihost_v1.py): the Collector as users deploy it
across hosts (the gateway and Jaeger on A, an agent on B, the agent SIGKILLed for part of the run) and one
``VERL_OTEL_DIR`` shared by both hosts (the collisions of a shared folder, on a real run)."""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers.hosts import Host, Hosts, hosts_or_skip
from helpers.hosts_ray import HostProm, RayCluster, host_env
from helpers.multihost_v1 import V1Run, v1_run
from helpers.prom import available as prom_available
from helpers.real_stack import go_binaries, wait_until

from verl_otel import semconv as sc
from verl_otel.analysis.otlp_json import read_file
from verl_otel.analysis.step_traces import Span

pytestmark = pytest.mark.verl

OUT = "/tmp/demo"  # the demo's folder on host A, and every host's VERL_OTEL_DIR (each on its own /tmp)
GATHERED = "/tmp/gathered"  # `verl-otel gather`'s folder on A
STEPS = 2
HANG = "update_actor@2=12"  # a stall in each training worker (watched there), so on host B too
LINGER_S = 45  # the run's processes stay up this long after fit(): discovery and `top` are asked then
SD_PORT = 9470  # the driver's http_sd endpoint, in host A's own port space
STALL_ENV = {sc.ENV_STALL_SECONDS: "8", sc.ENV_STALL_MIN_SECONDS: "3", sc.ENV_STALL_FACTOR: "3"}
VERL_OTEL = [sys.executable, "-m", "verl_otel.cli.main"]
TIMINGS: dict[str, float] = {}


@dataclass
class Cluster:
    hosts: Hosts
    ray: RayCluster

    @property
    def a(self) -> Host:
        return self.hosts[0]

    @property
    def b(self) -> Host:
        return self.hosts[1]


@dataclass
class MultiHostRun:
    cluster: Cluster
    rc: int
    log: str
    answers: dict[str, subprocess.CompletedProcess] = field(default_factory=dict)  # the commands run on A
    up: list[dict] | None = None  # Prometheus on A: `up` while the run lingered (None: no Prometheus here)

    def data(self, host: Host) -> Path:
        """``host``'s VERL_OTEL_DIR, seen from here."""
        return host.outside(OUT)

    def spans(self) -> list[Span]:
        """The whole run's spans, as `verl-otel gather` brought them to A."""
        return read_file(self.cluster.a.outside(GATHERED) / sc.TRACES_FILE).spans

    def failure(self) -> str:
        demo_log = self.data(self.cluster.a) / "demo.log"
        return self.log[-3000:] + (demo_log.read_text(errors="replace")[-6000:] if demo_log.exists() else "")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    t0 = time.monotonic()
    with hosts_or_skip(2, tmp_path_factory.mktemp("hosts")) as hosts:
        ray = RayCluster(hosts).start()
        TIMINGS["cluster"] = time.monotonic() - t0
        yield Cluster(hosts, ray)


def test_an_actor_pinned_to_host_b_runs_there(cluster):
    """The bare cluster: a driver on A, a task on each host, each answering with its host's name and address."""
    code = f"""
import json, socket, ray
ray.init(address="{cluster.ray.address}")
@ray.remote(num_cpus=0)
def where():
    return socket.gethostname(), ray.util.get_node_ip_address()
print(json.dumps({{h: ray.get(where.options(resources={{h: 0.01}}).remote()) for h in ("hosta", "hostb")}}))
print(json.dumps(sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])))
"""
    lines = cluster.ray.python(cluster.a, code).strip().splitlines()
    where, nodes = json.loads(lines[-2]), json.loads(lines[-1])
    assert where == {"hosta": ["hosta", cluster.a.addr], "hostb": ["hostb", cluster.b.addr]}
    assert nodes == sorted([cluster.a.addr, cluster.b.addr])


def _on_a(a: Host, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return a.run([*VERL_OTEL, *args], host_env(), timeout=timeout, check=False)


def _scraped(prom: HostProm, timeout: float = 30) -> list[dict]:
    """``up`` once Prometheus found both hosts' processes and scraped each (or what it had at ``timeout``)."""
    deadline, rows = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        rows = prom.query("up")
        hosts = {r["metric"].get(sc.LABEL_HOST) for r in rows}
        if hosts >= {"hosta", "hostb"} and all(r["value"][1] == "1" for r in rows):
            break
        time.sleep(1)
    return rows


def _fit_done(cluster: Cluster) -> bool:
    """The last step's span is in the trainer's trace file (on whichever host verl's TaskRunner landed): fit()
    is done and the run lingers. (Its console line reaches A's demo.log only as the run ends.)"""
    for host in cluster.hosts:
        path = host.outside(OUT) / sc.TRACES_FILE
        if path.exists():
            spans = read_file(path, keep=lambda s: s if s.name == sc.SPAN_STEP else None).spans
            if any(s.attributes.get(sc.ATTR_GLOBAL_STEP) == STEPS for s in spans):
                return True
    return False


def _while_lingering(a: Host, answers: dict[str, subprocess.CompletedProcess]) -> None:
    """What a user asks on the head while the run is up: the driver's service discovery, and `top`."""
    fetch = (
        f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{SD_PORT}/targets').read().decode())"
    )
    answers["targets"] = a.run([sys.executable, "-c", fetch], host_env(), check=False)
    answers["top"] = _on_a(a, "top", "--once", "--targets", OUT, "--width", "200")


@pytest.fixture(scope="module")
def multihost_run(cluster) -> Iterator[MultiHostRun]:
    a, b = cluster.a, cluster.b
    t0 = time.monotonic()
    # the model and data on every node's own disk, at the same path (as a user copies them or uses a shared FS)
    a.run([sys.executable, "-c", f"from verl_otel.demo import assets; assets.build('{OUT}/assets')"], host_env())
    shutil.copytree(a.outside(f"{OUT}/assets"), b.outside(f"{OUT}/assets"), symlinks=True, dirs_exist_ok=True)
    env = host_env(**STALL_ENV, **{sc.ENV_SD_PORT: str(SD_PORT)})
    cmd = [*VERL_OTEL, "demo", "--trainer", "legacy", "--steps", str(STEPS), "--out", OUT, "--hang", HANG,
           "--ray-address", cluster.ray.address, "--nnodes", "2", "--linger", str(LINGER_S)]  # fmt: skip
    out_path = a.outside("/tmp/demo.out")
    answers: dict[str, subprocess.CompletedProcess] = {}
    up = None
    # one Prometheus on the head with nothing but the driver's http_sd address
    prom = HostProm(a, f"http://127.0.0.1:{SD_PORT}/targets").start() if prom_available() else None
    with open(out_path, "w") as out:
        proc = a.popen(cmd, env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 540
        while proc.poll() is None and time.monotonic() < deadline:
            if _fit_done(cluster):
                time.sleep(6)  # the driver's next discovery refresh (every 5 s)
                _while_lingering(a, answers)
                up = _scraped(prom) if prom is not None else None
                break
            time.sleep(2)
        rc = proc.wait(timeout=max(10, deadline - time.monotonic() + LINGER_S))
    finally:
        if prom is not None:
            prom.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    TIMINGS["run"] = time.monotonic() - t0
    # the cluster outlives the run: bring every node's files to A, then read them there
    answers["gather"] = _on_a(a, "gather", "--address", cluster.ray.address, "--dir", OUT, "--out", GATHERED)
    answers["doctor"] = _on_a(a, "doctor", "--dir", GATHERED, "--json")
    answers["slow-steps"] = _on_a(a, "slow-steps", "--file", f"{GATHERED}/{sc.TRACES_FILE}", "--json")
    yield MultiHostRun(cluster, rc, out_path.read_text(errors="replace"), answers, up)


def _answer(run: MultiHostRun | V1Run, name: str) -> str:
    """What ``name`` printed on A (it must have answered)."""
    proc = run.answers.get(name)
    assert proc is not None, f"`{name}` was not asked: the run never lingered\n{run.failure()}"
    assert proc.returncode == 0, f"{proc.args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_the_run_ends_normally(multihost_run):
    assert multihost_run.rc == 0, multihost_run.failure()


def _host(span: Span) -> str:
    return str(span.resource.get(sc.RES_NODE, ""))


def test_one_trace_per_step_with_spans_of_both_hosts_every_parent_present(multihost_run):
    """One trace per step: the other host's training-worker calls sit under the phases of the trainer's host
    (verl's TaskRunner lands on either host; the driver stays on A), every parent there."""
    _assert_step_traces(multihost_run.spans())


def _assert_step_traces(spans: list[Span]) -> None:
    steps = [s for s in spans if s.name == sc.SPAN_STEP and s.attributes.get(sc.ATTR_GLOBAL_STEP, 0) >= 1]
    assert sorted(s.attributes[sc.ATTR_GLOBAL_STEP] for s in steps) == list(range(1, STEPS + 1)), steps
    by_trace: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        by_trace[s.trace_id].append(s)
    for step in steps:
        trace = by_trace[step.trace_id]
        assert {_host(s) for s in trace} == {"hosta", "hostb"}, (step, {_host(s) for s in trace})
        by_id = {s.span_id: s for s in trace}
        orphans = [(s.name, _host(s)) for s in trace if s.parent_id and s.parent_id not in by_id]
        assert not orphans, orphans
        # the trainer's phases (on the host verl's TaskRunner landed on) hold the other host's worker calls
        trainer = _host(step)
        other = [s for s in trace if _host(s) != trainer]
        assert other and all(s.parent_id for s in other), [(s.name, s.parent_id) for s in other if not s.parent_id]
        workers = [s for s in other if s.name.startswith("worker.")]
        assert workers and all(_host(by_id[s.parent_id]) == trainer for s in workers), [
            (s.name, by_id[s.parent_id].name, _host(by_id[s.parent_id])) for s in workers
        ]


def test_training_ranks_on_different_hosts(multihost_run):
    """World size 2 across the namespaces: rank 0's and rank 1's worker calls each from its own host."""
    ranks: dict[int, set[str]] = defaultdict(set)
    for s in multihost_run.spans():
        if s.name.startswith("worker.") and sc.ATTR_WORKER_RANK in s.attributes:
            ranks[int(s.attributes[sc.ATTR_WORKER_RANK])].add(_host(s))
    assert set(ranks) == {0, 1}, dict(ranks)
    assert len(ranks[0]) == len(ranks[1]) == 1 and ranks[0] != ranks[1], dict(ranks)


def test_each_host_keeps_its_own_files(multihost_run):
    """No shared filesystem: each host's processes wrote their trace file on their own host's disk."""
    for host in multihost_run.cluster.hosts:
        own = multihost_run.data(host) / sc.TRACES_FILE
        assert own.exists() and own.stat().st_size > 0, host.name
        assert {_host(s) for s in read_file(own).spans} == {host.name}


def test_the_drivers_service_discovery_lists_both_hosts(multihost_run):
    """http_sd on the head, asked on A while the run lingers: every host's processes, B's on B's address."""
    a, b = multihost_run.cluster.a, multihost_run.cluster.b
    groups = json.loads(_answer(multihost_run, "targets"))
    by_host: dict[str, list[str]] = defaultdict(list)
    for g in groups:
        by_host[g["labels"][sc.LABEL_HOST]] += g["targets"]
    assert set(by_host) == {"hosta", "hostb"}, groups
    for target in by_host["hostb"]:
        addr = target.rsplit(":", 1)[0]
        assert addr == b.addr and not ipaddress.ip_address(addr).is_loopback, target
    assert all(t.rsplit(":", 1)[0] in ("127.0.0.1", a.addr) for t in by_host["hosta"]), by_host


def test_one_prometheus_on_the_head_scrapes_every_process_of_both_hosts(multihost_run):
    """Only an http_sd config, no per-node file: `up == 1` for every process the driver lists, B's on B's address."""
    if multihost_run.up is None:
        pytest.skip("no prometheus here (Debian's `prometheus`)")
    b = multihost_run.cluster.b
    listed = {t for g in json.loads(_answer(multihost_run, "targets")) for t in g["targets"]}
    assert {r["metric"]["instance"] for r in multihost_run.up} == listed, multihost_run.up
    assert {r["metric"].get(sc.LABEL_HOST) for r in multihost_run.up} == {"hosta", "hostb"}
    assert all(r["value"][1] == "1" for r in multihost_run.up), multihost_run.up
    on_b = [r["metric"]["instance"] for r in multihost_run.up if r["metric"].get(sc.LABEL_HOST) == "hostb"]
    assert on_b and all(i.startswith(f"{b.addr}:") for i in on_b), on_b


def test_top_on_the_head_lists_both_hosts(multihost_run):
    frame = _answer(multihost_run, "top")
    line = next((ln for ln in frame.splitlines() if "hosts:" in ln), "")
    assert "hosta (" in line and "hostb (" in line, frame


def test_a_stall_on_host_b_is_named_by_doctor_on_a(multihost_run):
    """The hang in B's training worker left evidence on B's disk, named with its host; gathered to A, `doctor`
    names host B, its process and the frame."""
    on_b = list((multihost_run.data(multihost_run.cluster.b) / sc.STALLS_DIR).glob("*hostb*"))
    assert on_b, list((multihost_run.data(multihost_run.cluster.b)).rglob("*"))
    report = json.loads(_answer(multihost_run, "doctor"))
    on_hostb = [r for r in report["stalls"] if r["host"] == "hostb"]
    assert on_hostb, report
    assert all(r["pid"] and r["frame"] for r in on_hostb), on_hostb


def test_namespaces_share_one_clock(multihost_run):
    """slow-steps on the gathered file: no clock skew between the hosts (one kernel, one clock)."""
    ranking = json.loads(_answer(multihost_run, "slow-steps"))
    assert len(ranking) == STEPS, ranking
    assert all(not r["clock_skew_s"] for r in ranking), [(r["global_step"], r["clock_offsets"]) for r in ranking]


# -- the v1 run: the Collector agent on B, one shared VERL_OTEL_DIR ---------------------------------------------


@pytest.fixture(scope="module")
def multihost_v1(cluster) -> Iterator[V1Run]:
    bins = go_binaries()  # without Go: skipped, failed under CI=true
    state = Path(tempfile.mkdtemp(prefix="verl-otel-multihost-", dir="/var/tmp"))  # outside every host's /tmp
    t0 = time.monotonic()
    try:
        with v1_run(cluster.ray, state, bins) as run:
            TIMINGS["v1 run"] = time.monotonic() - t0
            yield run
    finally:
        shutil.rmtree(state, ignore_errors=True)


def test_the_v1_run_ends_normally_through_the_agents_outage(multihost_v1):
    o = multihost_v1.outage
    assert multihost_v1.rc == 0, multihost_v1.failure()
    assert not o.errors and o.killed and o.restarted, (o, multihost_v1.failure())


def test_every_step_whole_in_jaeger_once_the_agent_on_b_is_back(multihost_v1):
    """B's processes send to B's agent (the driver's loopback endpoint, on B), which forwards to the gateway on
    A: step 2's spans made on B while the agent was down (SIGKILL) reach Jaeger once it is back, every step one
    trace with spans of both hosts and every parent present."""
    o = multihost_v1.outage

    def whole() -> list[Span]:
        spans = multihost_v1.jaeger_spans()
        try:
            _assert_step_traces(spans)
        except AssertionError:
            return []
        return spans

    spans = wait_until(whole, timeout=90, every=3)
    if not spans:
        _assert_step_traces(multihost_v1.jaeger_spans())
    assert o.killed and o.restarted
    during = [s for s in spans if _host(s) == "hostb" and o.killed < s.end_ns / 1e9 < o.restarted]
    assert during, "no span of host B ended while its agent was down"


def test_a_loopback_endpoint_forwarded_to_b_is_named_there(multihost_v1):
    """The driver's loopback endpoint reached B's processes as it is: they say so in one start-up line."""
    log = (multihost_v1.shared / "demo.log").read_text(errors="replace")
    assert "is loopback on host hostb (the driver runs on hosta)" in log, multihost_v1.failure()


def test_the_shared_targets_file_keeps_both_hosts_processes(multihost_v1):
    """Every process of both hosts writes the one shared prometheus_targets.json: read five times while the run
    lingered, it always lists both hosts' processes, B's on B's address (none dropped as a dead local pid)."""
    assert len(multihost_v1.targets) == 5, multihost_v1.failure()
    for groups in multihost_v1.targets:
        assert groups is not None
        by_host: dict[str, list[str]] = defaultdict(list)
        for g in groups:
            by_host[g["labels"][sc.LABEL_HOST]] += g["targets"]
        assert set(by_host) == {"hosta", "hostb"}, groups
        assert all(t.rsplit(":", 1)[0] == multihost_v1.b.addr for t in by_host["hostb"]), by_host


def test_the_shared_folder_keeps_both_hosts_evidence_apart(multihost_v1):
    """The hang in both training workers (one per host) of the same step and phase: two evidence files in the
    one stalls/ folder, each named with its host; `doctor` on A reads both, one record per host. Spans a process
    kept back while B's agent was down (unsent/) carry the host in their name as well."""
    stalls = sorted(p.name for p in (multihost_v1.shared / sc.STALLS_DIR).glob("*"))
    for host in ("hosta", "hostb"):
        assert any(host in n and "update_actor" in n for n in stalls), stalls
    report = json.loads(_answer(multihost_v1, "doctor"))
    hosts = {r["host"] for r in report["stalls"] if r["phase"] == sc.PHASE_UPDATE_ACTOR}
    assert hosts == {"hosta", "hostb"}, report["stalls"]
    unsent = [p.name for p in (multihost_v1.shared / sc.UNSENT_DIR).glob("*")]
    assert all("hosta" in n or "hostb" in n for n in unsent), unsent
