"""Hosts made of Linux namespaces on this machine, for the multi-host tests (issue 34).

Each host is a holder process (``unshare --net --uts --mount --pid --fork --mount-proc``, pid 1 of its own PID
namespace) with its own hostname, an address on a veth pair whose other end sits on one bridge in the root
namespace (the same code for 2 hosts or 8), loopback, a default route via the bridge, its own ``/tmp`` (a folder
of the test's, bind-mounted, so the test reads each host's files from outside), a private tmpfs on ``/dev/shm``,
and an ``/etc/hosts`` naming every host (gloo and Ray resolve a hostname to its host's address). Commands run
inside with ``nsenter`` into all of them (``Host.run``, ``Host.popen``), with the environment passed explicitly.

Teardown ends each holder: the kernel then ends every process of its PID namespace, and the namespaces, their
mounts and veth ends go with them; the bridge is deleted. A holder also dies with the test process (``unshare
--kill-child`` under a parent-death signal), and leftovers of a crashed run (links and holders named after a
process that is gone) are cleared when the next run starts. Traffic only ever goes to these addresses.

Where namespaces cannot be made the tests skip with the reason; under ``CI=true`` that is a failure.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PREFIX = "vot"  # every link this helper makes: vot<owner pid base36><role>; holders carry MARK in their argv
MARK = "verl-otel-host"
NAMES = ("hosta", "hostb", "hostc", "hostd", "hoste", "hostf", "hostg", "hosth")
_PR_SET_PDEATHSIG = 1


class NoHostsError(RuntimeError):
    """Namespaces, veths or bridges cannot be made here (not root, a sandbox without them)."""


def _b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def _sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NoHostsError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _die_with_parent() -> None:  # in the child, before exec: the holder's unshare dies with the test process
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def clear_leftovers() -> None:
    """Links and holders of a run whose test process is gone (crashed, killed): named after its pid."""
    links = _sh("ip", "-o", "link", "show", check=False).stdout
    for name in re.findall(rf"^\d+: ({PREFIX}[0-9a-z]+)[@:]", links, re.M):
        owner = re.match(rf"{PREFIX}([0-9a-z]{{1,5}})[bh]", name)
        if owner and not _alive(int(owner.group(1), 36)):
            _sh("ip", "link", "del", name, check=False)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        found = [a for a in argv if a.startswith(MARK.encode() + b":")]
        if found and not _alive(int(found[0].split(b":")[1])):
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), signal.SIGKILL)


def _subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.231-10.238.x.0 picked from our pid, not overlapping any route of this machine."""
    routes = _sh("ip", "-4", "route", "show", "table", "all", check=False).stdout
    taken = [ipaddress.ip_network(m, strict=False) for m in re.findall(r"(\d+\.\d+\.\d+\.\d+(?:/\d+)?)", routes)]
    seed = os.getpid()
    for i in range(2000):
        n = seed + i * 7919
        net = ipaddress.ip_network(f"10.{231 + n % 8}.{(n // 8) % 254 + 1}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise NoHostsError("no free 10.231-238.x.0/24 subnet")


@dataclass
class Host:
    """One namespaced host: ``name`` (its hostname), ``addr`` (its address), ``pid`` (its holder, pid 1 inside),
    ``root`` (the folder outside that is its ``/tmp``)."""

    name: str
    addr: str
    pid: int
    root: Path
    unshare: subprocess.Popen = field(repr=False)

    def outside(self, inside: str | Path) -> Path:
        """Where a path under the host's /tmp is seen from this (the root) namespace."""
        return self.root / "tmp" / Path(inside).relative_to("/tmp")

    def nsenter(self) -> list[str]:
        return ["nsenter", "-t", str(self.pid), "--net", "--uts", "--mount", "--pid", "--ipc"]

    def popen(self, cmd: Sequence[str], env: dict[str, str], cwd: str | Path = "/", **kw: object) -> subprocess.Popen:
        """``cmd`` inside the host, with exactly ``env`` (nsenter passes its own environment on)."""
        return subprocess.Popen([*self.nsenter(), f"--wd={cwd}", "--", *cmd], env=env, **kw)  # type: ignore[call-overload]

    def run(
        self, cmd: Sequence[str], env: dict[str, str], cwd: str | Path = "/", timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [*self.nsenter(), f"--wd={cwd}", "--", *cmd],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"on {self.name}: {' '.join(cmd)} -> {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc


class Hosts:
    """``with Hosts(2, workdir) as hosts:`` hosts[0] is host A. Everything is undone on exit, even on error."""

    def __init__(self, n: int, workdir: Path, shm_mib: int = 1024) -> None:
        if not 1 <= n <= len(NAMES):
            raise ValueError(f"1 to {len(NAMES)} hosts")
        self.n, self.workdir, self.shm_mib = n, Path(workdir), shm_mib
        self.tag = f"{PREFIX}{_b36(os.getpid())}"
        self.bridge = f"{self.tag}b"
        self.hosts: list[Host] = []
        self.net: ipaddress.IPv4Network | None = None

    @property
    def gateway(self) -> str:
        """The bridge's address in the root namespace: a service the test runs here is reachable from every host."""
        assert self.net is not None
        return str(self.net.network_address + 254)

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def __enter__(self) -> Hosts:
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _make(self) -> None:
        if os.geteuid() != 0:
            raise NoHostsError("not root: network, UTS, mount and PID namespaces need root")
        for tool in ("unshare", "nsenter", "ip"):
            if shutil.which(tool) is None:
                raise NoHostsError(f"`{tool}` is not installed")
        clear_leftovers()
        self.net = net = _subnet()
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        names = NAMES[: self.n]
        addrs = [str(net.network_address + 1 + i) for i in range(self.n)]
        hosts_file = "127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for a, n in zip(addrs, names, strict=True))
        for i, (name, addr) in enumerate(zip(names, addrs, strict=True)):
            root = self.workdir / name
            (root / "tmp").mkdir(parents=True, exist_ok=True)
            (root / "hosts").write_text(hosts_file)
            self.hosts.append(self._holder(name, addr, root, i))

    def _holder(self, name: str, addr: str, root: Path, i: int) -> Host:
        unshare = subprocess.Popen(
            ["unshare", "--net", "--uts", "--mount", "--pid", "--ipc", "--fork", "--mount-proc", "--kill-child",
             "--propagation", "private", "sh", "-c", "while :; do sleep 3600; done", f"{MARK}:{os.getpid()}:{name}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_die_with_parent,
        )  # fmt: skip
        pid = self._child_of(unshare)
        host = Host(name, addr, pid, root, unshare)
        self.hosts.append(host)  # from here on close() ends it, whatever fails next
        veth = f"{self.tag}h{i}"
        _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
        _sh("ip", "link", "set", f"{veth}p", "master", self.bridge, "up")
        _sh("ip", "link", "set", veth, "netns", str(pid))
        setup = (
            f"set -e; hostname {name}; ip link set lo up; ip link set {veth} name eth0; "
            f"ip addr add {addr}/24 dev eth0; ip link set eth0 up; ip route add default via {self.gateway}; "
            f"mount --bind {root / 'hosts'} /etc/hosts; mount --bind {root / 'tmp'} /tmp; "
            f"mount -t tmpfs -o size={self.shm_mib}m tmpfs /dev/shm"
        )
        proc = subprocess.run([*host.nsenter(), "--", "sh", "-c", setup], capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise NoHostsError(f"setting up {name} failed: {proc.stderr.strip()}")
        self.hosts.pop()
        return host

    @staticmethod
    def _child_of(unshare: subprocess.Popen) -> int:
        """The holder: unshare's forked child, pid 1 of the new PID namespace."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if unshare.poll() is not None:
                err = unshare.stderr.read().decode(errors="replace") if unshare.stderr else ""
                raise NoHostsError(f"unshare failed: {err.strip()}")
            with contextlib.suppress(OSError, ValueError):
                kids = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children").read_text().split()
                if kids:
                    return int(kids[0])
            time.sleep(0.02)
        raise NoHostsError("unshare's child did not appear")

    def close(self) -> None:
        for host in self.hosts:
            with contextlib.suppress(OSError):
                os.kill(host.pid, signal.SIGKILL)  # pid 1 of its namespace: every process in it goes too
        for host in self.hosts:
            with contextlib.suppress(subprocess.TimeoutExpired):
                host.unshare.wait(timeout=20)
            if host.unshare.poll() is None:
                host.unshare.kill()
        for i in range(len(NAMES)):
            if Path(f"/sys/class/net/{self.tag}h{i}p").exists():
                _sh("ip", "link", "del", f"{self.tag}h{i}p", check=False)
        if Path(f"/sys/class/net/{self.bridge}").exists():
            _sh("ip", "link", "del", self.bridge, check=False)
        self.hosts = []


def skip_or_fail(reason: str) -> None:
    """No namespaces here: skip, but under CI=true the multi-host tests must run."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the multi-host tests must run)")
    pytest.skip(reason)


@contextlib.contextmanager
def hosts_or_skip(n: int, workdir: Path) -> Iterator[Hosts]:
    try:
        hosts = Hosts(n, workdir).__enter__()
    except NoHostsError as exc:
        skip_or_fail(f"no namespaced hosts on this machine: {exc}")
    try:
        yield hosts
    finally:
        hosts.close()
