"""The trainer's context in verl's batch objects (DataProto, KVBatchMeta, TensorDict) and the worker
spans it yields; the real runs (FSDP workers in their own processes) are in test_e2e_demo.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from transfer_queue.metadata import KVBatchMeta
from verl import DataProto

from helpers.procs import clean_env, run_py
from helpers.traces import load_spans

from verl_otel import semconv as sc
from verl_otel.hooks.verl_batches import find_batch, put, take

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _batches():
    return {
        "dataproto": DataProto.from_dict(tensors={"a": torch.zeros(4, 2)}, meta_info={"keep": 1}),
        "kvbatchmeta": KVBatchMeta(keys=["a", "b"], tags=[{}, {}], extra_info={"keep": 1}),
        "tensordict": TensorDict({"a": torch.zeros(4, 2)}, batch_size=[4]),
    }


@pytest.mark.parametrize("kind", ["dataproto", "kvbatchmeta", "tensordict"])
def test_put_undo_and_take(kind):
    batch = _batches()[kind]
    assert find_batch((1, "x", batch), {}) is batch
    undo = put(batch, TP)
    assert undo is not None
    undo()
    assert take(batch) is None, "undo leaves the batch as it was"
    put(batch, TP)
    assert take(batch) == TP
    assert take(batch) is None, "take removes it: verl's code never sees the key"


def test_undo_restores_an_earlier_value():
    batch = DataProto.from_dict(tensors={"a": torch.zeros(2, 2)}, meta_info={sc.TRACEPARENT_KEY: "older"})
    put(batch, TP)()
    assert batch.meta_info[sc.TRACEPARENT_KEY] == "older"


def test_chunks_carry_it():
    """verl's dispatch chunks the batch: every chunk carries the context."""
    dp = DataProto.from_dict(tensors={"a": torch.zeros(4, 2)}, non_tensors={"u": np.arange(4)})
    put(dp, TP)
    assert [c.meta_info.get(sc.TRACEPARENT_KEY) for c in dp.chunk(2)] == [TP, TP]
    kv = KVBatchMeta(keys=["a", "b", "c", "d"], tags=[{}] * 4)
    put(kv, TP)
    assert [c.extra_info.get(sc.TRACEPARENT_KEY) for c in kv.chunk(2)] == [TP, TP]


def test_no_place_no_change():
    assert find_batch((1, "x", [1, 2]), {"y": None}) is None
    assert put([1, 2], TP) is None and take([1, 2]) is None


@pytest.mark.parametrize("kind", ["kv", "td", "dp"])
def test_worker_call_span_under_the_phase(tmp_path, kind):
    """verl's real func_generator inside a real marked_timer phase: the worker side gets the
    context (and removes it), its span hangs under the phase, the trainer's batch is unchanged."""
    out = tmp_path / "data"
    proc = run_py(
        [str(Path(__file__).parent / "drive_worker_calls.py"), kind],
        clean_env(VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(out)),
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sc.TRACEPARENT_KEY not in report["after"], report
    assert report["worker_saw_key"] is False, "the worker took the key out before verl's code runs"
    assert report["traced_class"] == "actor_rollout_update_actor", "verl's per-method class name is kept"
    assert report["plain_module"] == "verl.single_controller.ray.base", "other methods are left alone"
    spans = load_spans(out / "traces.jsonl")
    by_name = {s.name: s for s in spans}
    worker, phase, step = by_name["worker.update_actor"], by_name["update_actor"], by_name["step"]
    assert worker.parent_id == phase.span_id and worker.trace_id == step.trace_id
    assert worker.attributes["verl.worker.batch_size"] == 4
