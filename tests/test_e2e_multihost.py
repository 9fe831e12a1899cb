"""verl-otel across real hosts on one machine (issue 34): two hosts made of Linux namespaces (helpers/hosts.py:
own hostname, address, /tmp, PID space) and a real Ray cluster across them (head on host A, a worker node on B),
shared by every test of this module (``cluster``: its hosts, each host's files via ``Host.outside``, and
``Host.run`` / ``RayCluster.python`` to run a command on a given host)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from helpers.hosts import Host, Hosts, hosts_or_skip
from helpers.hosts_ray import RayCluster

pytestmark = pytest.mark.verl

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
