"""Discovery and gather through a real Ray (one node, ``ray.init`` here, serialized with the other real runs by
/tmp/verl-otel-heavy.lock): a Ray actor with its own VERL_OTEL_DIR (another node's disk) wires a real runtime, so
its /metrics is served and listed in Ray's GCS store by its flusher; this process is the driver (``ray.init``
through our hook): its node's file_sd file and its http_sd endpoint list the actor, whose page answers; a real
Prometheus finds it through http_sd_configs; then ``verl-otel gather`` brings the actor's node's files here
through a real Ray task pinned to the node, and ``doctor`` and ``slow-steps`` read the gathered folder."""

from __future__ import annotations

import fcntl
import json
import os
import time
import urllib.request
from collections.abc import Iterator

import pytest

from helpers.otlp_receiver import free_port
from helpers.step_spans import sdk_run, write_lines

from verl_otel import runtime
from verl_otel import semconv as sc
from verl_otel.cli.gather import gather
from verl_otel.cli.main import main

pytestmark = pytest.mark.verl  # real Ray (a local one: about 20 s)
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[dict]:
    from verl_otel.hooks import ray_env

    base = tmp_path_factory.mktemp("ray-discovery")
    node_dir, head_dir = base / "node", base / "head"
    sd_port = free_port()
    lock = open("/tmp/verl-otel-heavy.lock", "a")  # noqa: SIM115 - held for the module's life
    fcntl.flock(lock, fcntl.LOCK_EX)
    saved = {k: os.environ.get(k) for k in (sc.ENV_DIR, sc.ENV_SD_PORT)}
    os.environ[sc.ENV_DIR], os.environ[sc.ENV_SD_PORT] = str(head_dir), str(sd_port)
    runtime.reset_for_tests()
    try:
        # the driver: ray.init through our hook (the env travels, and this process starts the discovery)
        ray_env.init_wrapper(ray.init, None, (), {"num_cpus": 2, "include_dashboard": False})
        yield {"node_dir": node_dir, "head_dir": head_dir, "sd_port": sd_port}
    finally:
        ray.shutdown()
        runtime.current().finish()
        runtime.reset_for_tests()
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
        lock.close()


@ray.remote(num_cpus=0)
class Instrumented:
    """A process of the run on "another node": its own VERL_OTEL_DIR, a real runtime wired as a training worker."""

    def __init__(self, data_dir: str) -> None:
        os.environ[sc.ENV_DIR] = data_dir
        runtime.reset_for_tests()
        rt = runtime.current()
        rt.wire(sc.PROCESS_ROLE_WORKER)
        self.rt = rt

    def pid(self) -> int:
        return os.getpid()

    def finish(self) -> None:
        self.rt.finish()


def _sd(port: int) -> list[dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{sc.SD_PATH}", timeout=5) as resp:
        return json.loads(resp.read())


def _wait(check, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.3)
    return check()


def test_the_driver_lists_a_process_of_another_nodes_disk(cluster, prom_factory):
    actor = Instrumented.remote(str(cluster["node_dir"]))
    pid = ray.get(actor.pid.remote())

    def listed() -> list[dict]:
        return [g for g in _sd(cluster["sd_port"]) if g["labels"].get("__verl_otel_pid") == str(pid)]

    [group] = _wait(listed)
    labels = group["labels"]
    assert labels[sc.LABEL_PROCESS_ROLE] == sc.PROCESS_ROLE_WORKER and labels[sc.LABEL_HOST]
    target = group["targets"][0]
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=5) as resp:
        assert b"verl_otel_dropped_total" in resp.read()
    # its entry in Ray's store, under this job's prefix; the head node's processes listen on loopback
    from verl_otel.export.ray_store import RayStore, node_ip_bind

    store = RayStore.here()
    assert store is not None and node_ip_bind() == "127.0.0.1"
    [(key, doc)] = [(k, d) for k, d in store.entries(100).items() if d["labels"].get("__verl_otel_pid") == str(pid)]
    assert key.decode() == f"{sc.DISCOVERY_KV_PREFIX}{store.job}:{store.node}:{pid}:{target}"
    assert doc["node"] == store.node and doc["beat"] >= 1 and doc["targets"] == [target]
    # the head's file lists it too, though the process wrote only its own node's file
    head = json.loads((cluster["head_dir"] / sc.PROM_TARGETS_FILE).read_text())
    assert [g["targets"] for g in head if g["labels"].get("__verl_otel_pid") == str(pid)] == [[target]]
    own = json.loads((cluster["node_dir"] / sc.PROM_TARGETS_FILE).read_text())
    assert [g["targets"] for g in own] == [[target]]
    # a real Prometheus with only an http_sd_configs job pointing at the driver scrapes it
    server = prom_factory(
        config={
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "verl",
                    "http_sd_configs": [
                        {"url": f"http://127.0.0.1:{cluster['sd_port']}{sc.SD_PATH}", "refresh_interval": "1s"}
                    ],
                }
            ],
        }
    )
    rows = server.wait_for(f'up{{job="verl",{sc.LABEL_PROCESS_ROLE}="{sc.PROCESS_ROLE_WORKER}"}} == 1')
    assert rows[0]["metric"]["instance"] == target and rows[0]["metric"][sc.LABEL_HOST] == labels[sc.LABEL_HOST]
    # at its exit the process takes itself out of the store: the driver's next refresh drops it
    ray.get(actor.finish.remote())
    assert _wait(lambda: not listed())
    ray.kill(actor)


def test_gather_brings_a_nodes_files_and_the_readers_read_them(cluster, tmp_path, capsys):
    node = cluster["node_dir"]
    node.mkdir(parents=True, exist_ok=True)
    write_lines(node / sc.TRACES_FILE, sdk_run(time.time_ns() - 3600 * 10**9))
    (node / sc.STALLS_DIR).mkdir(exist_ok=True)
    (node / sc.STALLS_DIR / "step3-reward-reward_worker-hostB-42.txt").write_text(
        f"{sc.STALL_FILE_MAGIC}\nphase: reward\nstep: 3\nrole: reward_worker\npid: 42\nhost: hostB\n"
        f"kind: {sc.STALL_REWARD}\n\n"
    )
    (node / sc.UNSENT_DIR).mkdir(exist_ok=True)
    (node / sc.UNSENT_DIR / "spans-hostB-42.jsonl").write_bytes(b"")
    out = tmp_path / "gathered"
    got = gather(out, str(node), max_bytes=64 * 2**20, timeout_s=60)
    assert got.skipped == [] and len(got.nodes) == 1, got.skipped
    host = got.nodes[0].host
    assert (out / sc.HOSTS_DIR / host / "gather.json").exists()
    assert (out / sc.STALLS_DIR / "step3-reward-reward_worker-hostB-42.txt").exists()
    assert (out / sc.TRACES_FILE).read_bytes() == (node / sc.TRACES_FILE).read_bytes()
    assert main(["doctor", "--dir", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["host"], r["pid"], r["step"]) for r in doc["stalls"]] == [("hostB", 42, 3)]
    assert main(["slow-steps", "--file", str(out / sc.TRACES_FILE), "--since", "2h", "--json"]) == 0
    ranked = json.loads(capsys.readouterr().out)
    assert ranked and ranked[0]["global_step"] == 3  # helpers.step_spans.SLOW_STEP, read from the gathered file
    # bounded: a node budget smaller than its trace file keeps the newest whole lines only
    budget = (node / sc.TRACES_FILE).stat().st_size // 2
    small = gather(tmp_path / "small", str(node), max_bytes=budget, timeout_s=60)
    kept = (tmp_path / "small" / sc.TRACES_FILE).read_bytes()
    assert 0 < len(kept) <= budget and small.nodes[0].cut and kept.endswith(b"\n")
    assert (node / sc.TRACES_FILE).read_bytes().endswith(kept)
