"""The driver's discovery (export/discovery.py) and the gather's bounds (cli/gather_files.py) on their own: entries
of dead nodes and entries whose beat stopped left out, a process' own file entry kept as it wrote it, the driver's
replaced at each refresh and taken out at its exit; a node's files read within their byte budget (the newest whole
lines of a trace file), laid out once when two nodes share a folder."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from verl_otel import semconv as sc
from verl_otel.cli.gather_files import NodeFiles, collect, lay_out
from verl_otel.export import prometheus
from verl_otel.export.discovery import VIA_LABEL, ClusterTargets


def _entry(target: str, node: str, beat: int, host: str, pid: int = 1) -> dict:
    labels = {sc.LABEL_PROCESS_ROLE: sc.PROCESS_ROLE_WORKER, sc.LABEL_HOST: host, prometheus.PID_LABEL: str(pid)}
    return {"targets": [target], "labels": labels, "node": node, "beat": beat}


def _file(data: Path) -> list[dict]:
    return json.loads((data / sc.PROM_TARGETS_FILE).read_text())


def test_refresh_prunes_dead_nodes_and_stopped_beats(tmp_path, monkeypatch):
    own = prometheus.register_target(tmp_path, "10.0.0.1", 5, {sc.LABEL_PROCESS_ROLE: sc.PROCESS_ROLE_TRAINER})
    cluster = ClusterTargets(tmp_path, refresh_s=0)
    entries = {
        b"k1": _entry("10.0.0.2:7", "nodeB", 1, "hostB"),
        b"k2": _entry("10.0.0.3:7", "nodeC", 1, "hostC"),
        b"k3": _entry(own["targets"][0], "nodeA", 1, own["labels"][sc.LABEL_HOST]),  # its own entry, already there
    }
    cluster.refresh(entries, {"nodeA": "hostA", "nodeB": "hostB"}, {"hostC"})  # node C is dead
    assert sorted(g["targets"][0] for g in cluster.groups) == ["10.0.0.1:5", "10.0.0.2:7"]
    json.loads(cluster.answer())  # the http_sd body is JSON
    got = _file(tmp_path)
    assert own in got, "a process' own entry stays as it wrote it"
    [via] = [g for g in got if g["labels"].get(VIA_LABEL)]
    assert via["targets"] == ["10.0.0.2:7"] and via["labels"][sc.LABEL_HOST] == "hostB"
    # B's process stops beating (killed without its exit hook): left out once STALE_S has passed
    cluster.stale_s = 0.0
    cluster.refresh(entries, {"nodeA": "hostA", "nodeB": "hostB"}, set())
    assert [g["targets"][0] for g in cluster.groups] == []
    entries[b"k1"] = _entry("10.0.0.2:7", "nodeB", 2, "hostB")  # it beats again
    cluster.stale_s = 60.0
    cluster.refresh(entries, {"nodeA": "hostA", "nodeB": "hostB"}, set())
    assert sorted(g["targets"][0] for g in cluster.groups) == ["10.0.0.1:5", "10.0.0.2:7"]
    cluster.close()  # the driver's entries leave the file with it; the processes' own stay
    assert _file(tmp_path) == [own]


def test_a_loopback_address_of_another_node_is_never_listed(tmp_path, caplog):
    cluster = ClusterTargets(tmp_path, refresh_s=0)
    entries = {b"a": _entry("127.0.0.1:7", "nodeA", 1, "hostA"), b"b": _entry("127.0.0.1:8", "nodeB", 1, "hostB")}
    ours = logging.getLogger("verl_otel")  # our lines do not reach the root logger once our console is on
    ours.addHandler(caplog.handler)
    try:
        cluster.refresh(entries, {"nodeA": "hostA", "nodeB": "hostB"}, set(), here="nodeA")
    finally:
        ours.removeHandler(caplog.handler)
    assert [g["targets"] for g in cluster.groups] == [["127.0.0.1:7"]], "the driver's own node may say 127.0.0.1"
    assert "a process on hostB listens on 127.0.0.1:8 only" in caplog.text


def test_a_dead_nodes_entries_in_a_shared_file_go(tmp_path):
    theirs = {"targets": ["10.0.0.3:7"], "labels": {sc.LABEL_HOST: "hostC", prometheus.PID_LABEL: "1"}}
    (tmp_path / sc.PROM_TARGETS_FILE).write_text(json.dumps([theirs]))
    ClusterTargets(tmp_path, refresh_s=0).refresh({}, {"nodeA": "hostA"}, {"hostC"})
    assert _file(tmp_path) == []


def test_the_sd_port_taken_is_one_line_not_an_error(tmp_path):
    first = ClusterTargets(tmp_path, sd_port=0)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        second = ClusterTargets(tmp_path, sd_port=taken)
    assert first.sd_address is None and second.sd_address is None
    second.close()


def _node_dir(root: Path, lines: int = 50) -> Path:
    (root / sc.STALLS_DIR).mkdir(parents=True)
    (root / sc.STALLS_DIR / "step1-reward-reward_worker-h-1.txt").write_text("x" * 100)
    (root / sc.TRACES_FILE).write_bytes(b"".join(b'{"line": %d}\n' % i for i in range(lines)))
    (root / f"{sc.TRACES_FILE}.1").write_bytes(b'{"older": 1}\n')
    return root


def test_collect_keeps_the_evidence_first_and_the_newest_whole_lines(tmp_path):
    root = _node_dir(tmp_path / "n")
    whole = collect(str(root), 10**6, "h")
    assert set(whole.files) == {
        f"{sc.STALLS_DIR}/step1-reward-reward_worker-h-1.txt",
        sc.TRACES_FILE,
        f"{sc.TRACES_FILE}.1",
    }
    assert whole.cut == [] and whole.nbytes == sum(map(len, whole.files.values()))
    small = collect(str(root), 100 + 60, "h")  # the stall file, then 60 bytes of trace lines
    trace = small.files[sc.TRACES_FILE]
    assert small.nbytes <= 160 and trace.endswith(b'{"line": 49}\n') and trace.startswith(b'{"line"')
    assert small.cut and f"{sc.TRACES_FILE}.1" not in small.files
    tiny = collect(str(root), 50, "h")  # the stall file does not fit: named, not cut
    assert tiny.left and tiny.left[0].startswith(f"{sc.STALLS_DIR}/step1")


def test_lay_out_merges_traces_oldest_first_and_writes_a_shared_folder_once(tmp_path):
    root = _node_dir(tmp_path / "n", lines=2)
    a, b = collect(str(root), 10**6, "hostA"), collect(str(root), 10**6, "hostB")  # one shared folder, two nodes
    written = lay_out(tmp_path / "out", [a, b])
    merged = (tmp_path / "out" / sc.TRACES_FILE).read_bytes()
    assert merged == b'{"older": 1}\n{"line": 0}\n{"line": 1}\n', "once, oldest file first"
    assert written["hostB"] == 0 and written["hostA"] > 0
    other = NodeFiles(host="hostC", files={f"{sc.STALLS_DIR}/step1-reward-reward_worker-h-1.txt": b"y"})
    lay_out(tmp_path / "out2", [a, other])
    names = sorted(p.name for p in (tmp_path / "out2" / sc.STALLS_DIR).iterdir())
    assert names == ["hostC-step1-reward-reward_worker-h-1.txt", "step1-reward-reward_worker-h-1.txt"]
    summary = json.loads((tmp_path / "out2" / sc.HOSTS_DIR / "hostA" / "gather.json").read_text())
    assert summary["host"] == "hostA" and summary["bytes"] == a.nbytes
