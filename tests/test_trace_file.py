"""The embedded default's trace file is bounded and never corrupt: it rotates at its size limit keeping
N files (read back as one set), every line is whole (short writes continued, a failed write cut back),
a full disk is counted, and no symlink is followed (nor a lock file truncated)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from verl_otel.analysis.otlp_json import read_file, rotated_set
from verl_otel.export.otlp_json import OtlpJsonFileExporter


def _spans(n: int, name: str = "s") -> list:
    tracer = TracerProvider().get_tracer("t")
    out = []
    for i in range(n):
        span = tracer.start_span(f"{name}{i}", attributes={"pad": "x" * 200})
        span.end()
        out.append(span)
    return out


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rotates_keeping_n_files_and_reads_back_the_set(tmp_path):
    path = tmp_path / "traces.jsonl"
    drops: list[int] = []
    exp = OtlpJsonFileExporter(path, max_bytes=4000, keep=3, on_drop=drops.append)
    for i in range(40):
        exp.export(_spans(2, name=f"b{i}-"))
    files = rotated_set(path)
    assert [p.name for p in files] == ["traces.jsonl.2", "traces.jsonl.1", "traces.jsonl"]
    assert all(p.stat().st_size <= 4000 for p in files)
    got = read_file(path)
    assert got.malformed == 0 and drops == []
    names = [s.name for s in got.spans]
    assert names[-1] == "b39-1" and len(names) == len(set(names)), "oldest first, nothing twice"
    assert len(names) < 80, "files beyond the third were removed"


def test_short_writes_are_continued(tmp_path, monkeypatch):
    path = tmp_path / "traces.jsonl"
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:7])))  # 7 bytes at a time
    OtlpJsonFileExporter(path).export(_spans(3))
    monkeypatch.undo()
    assert len(_lines(path)) == 1


def test_a_failed_write_leaves_no_half_line_and_counts(tmp_path, monkeypatch):
    path = tmp_path / "traces.jsonl"
    drops: list[int] = []
    exp = OtlpJsonFileExporter(path, on_drop=drops.append)
    exp.export(_spans(1))
    real_write, calls = os.write, []

    def full_disk(fd: int, data: bytes) -> int:
        calls.append(1)
        if len(calls) == 1:
            return real_write(fd, bytes(data[:50]))  # part of the line made it ...
        raise OSError(errno.ENOSPC, "No space left on device")  # ... then the disk is full

    monkeypatch.setattr(os, "write", full_disk)
    exp.export(_spans(4))
    monkeypatch.undo()
    assert drops == [4]
    exp.export(_spans(2))
    assert [len(d["resourceSpans"][0]["scopeSpans"][0]["spans"]) for d in _lines(path)] == [1, 2]


def test_symlinks_are_not_followed_and_the_lock_is_not_truncated(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "traces.jsonl").symlink_to(victim)
    drops: list[int] = []
    OtlpJsonFileExporter(data / "traces.jsonl", on_drop=drops.append).export(_spans(1))
    assert drops == [1] and victim.read_text() == "precious\n"

    from verl_otel.export.prometheus import register_target

    (data / "prometheus_targets.json.lock").symlink_to(victim)
    register_target(data, "127.0.0.1", 9999, {"verl_process_role": "trainer"})
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("name", ["traces.jsonl.lock"])
def test_lock_file_is_reused_not_truncated(tmp_path, name):
    path = tmp_path / "traces.jsonl"
    (tmp_path / name).write_text("keep")
    OtlpJsonFileExporter(path).export(_spans(1))
    assert (tmp_path / name).read_text() == "keep"


def test_read_back_with_links_events_and_resource(tmp_path):
    """What the file keeps of a span, read through the CLI's parser (the tests' one reader): resource
    attributes, event attributes, links to other traces with their attributes, an error status; a line
    whose link has no ids is malformed (skipped and counted), the rest of the file is read."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.trace import Link, Status, StatusCode

    from helpers.traces import load_spans

    tracer = TracerProvider(
        resource=Resource.create({"service.name": "svc", "verl.process.role": "trainer"})
    ).get_tracer("t")
    window = tracer.start_span("window")
    window.end()
    step = tracer.start_span("step", links=[Link(window.get_span_context(), {"verl.async.staleness": 2})])
    step.add_event("verl.val_generation", {"verl.val_generation.score": 0.5, "tags": ["a", "b"]})
    step.set_status(Status(StatusCode.ERROR, "boom"))
    step.end()
    path = tmp_path / "traces.jsonl"
    OtlpJsonFileExporter(path).export([window, step])
    got_window, got_step = load_spans(path)
    assert got_step.resource["verl.process.role"] == "trainer" and got_step.service == "svc"
    (link,) = got_step.links
    ctx = window.get_span_context()
    assert (link.trace_id, link.span_id) == (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    assert (link.trace_id, link.span_id) == (got_window.trace_id, got_window.span_id)
    assert link.attributes == {"verl.async.staleness": 2}
    (event,) = got_step.events
    assert event.name == "verl.val_generation"
    assert event.attributes == {"verl.val_generation.score": 0.5, "tags": ["a", "b"]}
    assert got_step.status_error and not got_window.status_error and not got_window.links

    doc = _lines(path)[0]
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["links"][0]["spanId"] = ""
    path.write_text(json.dumps(doc) + "\n" + path.read_text())
    read = read_file(path)
    assert read.malformed == 1 and [s.name for s in read.spans] == ["window", "step"]
