"""A span buffer's unsent file read back while the process runs (export/spool.py), with real encoded spans:
chunks come from the head, oldest first and bounded; what was delivered is cut off the file (rewritten once
half of it was, removed when all of it was, and at shutdown), so ``push`` never sends it again; a damaged
line is skipped and counted; a file an earlier process of the same pid left is not appended to."""

from __future__ import annotations

from collections import Counter

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from verl_otel import semconv as sc
from verl_otel.analysis.otlp_json import read_file
from verl_otel.export import spool as spool_mod
from verl_otel.export.spool import Batch, Spool, unsent_path


def _batches(n: int) -> list[Batch]:
    """``n`` batches of one span each, named ``span-0`` .. (real SDK spans, encoded as the buffer does)."""
    mem = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(mem))
    for i in range(n):
        with provider.get_tracer("t").start_as_current_span(f"span-{i}"):
            pass
    return [Batch(encode_spans([s]).SerializeToString(), 1) for s in mem.get_finished_spans()]


def _names(chunk) -> list[str]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    out = []
    for b in chunk.batches:
        req = ExportTraceServiceRequest.FromString(b.data)
        out += [s.name for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    return out


def test_read_back_oldest_first_and_cut_off_when_delivered(tmp_path, monkeypatch):
    drops: Counter[str] = Counter()
    spool = Spool(unsent_path(tmp_path), 2**20, lambda r, n: drops.update({r: n}))
    spool.append(_batches(10), bounded=True)
    line = spool.path.read_bytes().index(b"\n") + 1
    monkeypatch.setattr(spool_mod, "READ_BYTES", 3 * line)  # about three lines a chunk
    assert spool.spans == 10

    first = spool.head_chunk()
    assert first is not None and _names(first)[0] == "span-0" and 1 <= len(first.batches) < 10
    assert spool.head_chunk() is first  # read once, sent until taken
    size = spool.path.stat().st_size
    spool.consumed(first)  # less than half delivered: the file stays as it is
    assert spool.path.stat().st_size == size and spool.spans == 10 - len(first.batches)

    sent = _names(first)
    while spool.waiting_bytes and spool.path.stat().st_size == size:
        chunk = spool.head_chunk()
        sent += _names(chunk)
        spool.consumed(chunk)
    # half of it delivered: rewritten with only what is still unsent
    assert spool.path.exists() and spool.path.stat().st_size < size
    assert [s.name for s in read_file(spool.path).spans] == [f"span-{i}" for i in range(len(sent), 10)]
    assert not list(spool.path.parent.glob("*.tmp"))

    while (chunk := spool.head_chunk()) is not None:
        sent += _names(chunk)
        spool.consumed(chunk)
    assert sent == [f"span-{i}" for i in range(10)]  # each once, oldest first
    assert not spool.path.exists() and spool.spans == 0 and sum(drops.values()) == 0

    spool.append(_batches(2), bounded=True)  # written again after it was removed
    assert [s.name for s in read_file(spool.path).spans] == ["span-0", "span-1"]


def test_shutdown_cuts_what_was_delivered_and_damaged_lines_are_counted(tmp_path, monkeypatch):
    drops: Counter[str] = Counter()
    spool = Spool(unsent_path(tmp_path), 2**20, lambda r, n: drops.update({r: n}))
    spool.append(_batches(1), bounded=True)
    with open(spool.path, "ab") as f:
        f.write(b'{"resourceSpans": [{"broken\n')  # a line cut by a crash
    spool._size = spool.path.stat().st_size  # as if the spool had written it
    spool.append(_batches(3), bounded=True)
    chunk = spool.head_chunk()
    assert chunk is not None and chunk.damaged == 1 and len(chunk.batches) == 4
    spool.consumed(chunk)
    assert drops == {sc.DROP_WRITE: 1} and not spool.path.exists()

    spool.append(_batches(4), bounded=True)
    monkeypatch.setattr(spool_mod, "READ_BYTES", spool.path.read_bytes().index(b"\n") + 1)  # a line a chunk
    spool.consumed(spool.head_chunk())  # a quarter delivered: not cut yet
    assert len(read_file(spool.path).spans) == 4
    spool.compact()  # the shutdown spill: push must not send the delivered line again
    assert [s.name for s in read_file(spool.path).spans] == ["span-1", "span-2", "span-3"]


def test_a_file_left_by_an_earlier_process_of_the_same_pid_is_left_to_push(tmp_path):
    path = unsent_path(tmp_path)
    path.parent.mkdir(parents=True)
    spool = Spool(path, 2**20, lambda r, n: None)
    old = Spool(path, 2**20, lambda r, n: None)
    old.append(_batches(2), bounded=True)  # "the earlier process"
    spool.append(_batches(1), bounded=True)
    assert spool.path != path and spool.path.parent == path.parent
    assert len(read_file(path).spans) == 2 and len(read_file(spool.path).spans) == 1
    while (chunk := spool.head_chunk()) is not None:
        spool.consumed(chunk)
    assert len(read_file(path).spans) == 2  # untouched
