"""Drives verl's real ``func_generator`` (the callable RayWorkerGroup binds per worker method) inside
a real ``marked_timer`` phase, in a fresh process activated by the environment alone. The
"remote" side is played in-process: execute_fn hands the dispatched batch to the worker-side span,
as verl's worker process would. Prints what the trainer's batch looked like after each call.

Usage: python drive_worker_calls.py kv|td|dp
"""

import json
import sys
from typing import ClassVar

import numpy as np
import torch
from tensordict import TensorDict
from transfer_queue.metadata import KVBatchMeta
from verl import DataProto
from verl.single_controller.ray.base import func_generator
from verl.utils.profiler import marked_timer

from verl_otel import semconv as sc
from verl_otel import trackers
from verl_otel.hooks import trainer as trainer_hooks
from verl_otel.hooks.verl_batches import batch_size, find_batch, take
from verl_otel.telemetry.worker_spans import WorkerSpan


class FakeTrainerState:
    global_steps = 1
    total_training_steps = None
    config: ClassVar[dict] = {
        "trainer": {"project_name": "proj", "experiment_name": "exp", "total_training_steps": 1},
        "data": {"train_batch_size": 4},
        "actor_rollout_ref": {"rollout": {"n": 2}},
    }


def make_batch(kind: str):
    if kind == "kv":
        return KVBatchMeta(keys=[f"k{i}" for i in range(4)], tags=[{} for _ in range(4)], extra_info={"x": 1})
    if kind == "td":
        return TensorDict({"input_ids": torch.zeros(4, 3)}, batch_size=[4])
    return DataProto.from_dict(
        tensors={"input_ids": torch.zeros(4, 3)},
        non_tensors={"uid": np.array(["a", "b", "c", "d"], dtype=object)},
        meta_info={"x": 1},
    )


def main() -> None:
    kind = sys.argv[1]
    trainer = FakeTrainerState()
    trainer_hooks.declare_run(trainer)
    trainer_hooks.start_fit(trainer, "v1")
    seen: dict[str, object] = {}

    def execute(method_name, *args, **kwargs):  # the worker process, played here
        batch = find_batch(args, kwargs)
        services = trackers.current().services
        with WorkerSpan(
            services, "update_actor", "actor", 0, take(batch), batch_size(batch)
        ):  # as hooks/update.py does
            seen["worker_saw_key"] = find_batch(args, kwargs) is not None and sc.TRACEPARENT_KEY in str(
                getattr(batch, "extra_info", None) or getattr(batch, "meta_info", None) or list(batch.keys())
            )
        return "out"

    traced = func_generator(
        None, "actor_rollout_update_actor", lambda wg, *a, **k: (a, k), lambda wg, o: o, execute, False
    )  # not blocking: no ray.get of our plain result
    plain = func_generator(None, "init_model", lambda wg, *a, **k: (a, k), lambda wg, o: o, execute, False)
    batch = make_batch(kind)
    timing: dict = {}
    with marked_timer("step", timing), marked_timer("update_actor", timing):
        assert traced(batch) == "out"
    after = list(batch.keys()) if kind == "td" else dict(getattr(batch, "extra_info", None) or batch.meta_info)
    trackers.current().steps.fit_ended(None)
    print(
        json.dumps(
            {
                "after": [str(k) for k in after],
                "worker_saw_key": seen["worker_saw_key"],
                "traced_class": type(traced).__name__,
                "plain_module": type(plain).__module__,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
