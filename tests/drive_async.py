"""Drives fully_async's real rollouter and trainer code through verl-otel's hooks, in the order verl
calls them, in a fresh process activated by the environment alone (the .pth start-up hook).

fully_async cannot run on this CPU machine (see docs/guides/async.md), so the two Ray actors are built
with ``object.__new__`` on their real classes and given the attributes their methods read; the
MessageQueue between them is verl's real MessageQueue actor on a real local Ray. What stands in:
the LLM servers (``generate_sequences_single`` returns a small DataProto whose min/max_global_steps
are the weights version at start/end, as verl's servers report), the trainer's PPO compute (the
``_fit_compute_*``/``_fit_update_*`` methods its real ``fit_step`` calls), and the checkpoint engine
(the trainer sets the servers' version, then calls the rollouter's real ``reset_staleness`` and logs
its timing, as ``_fit_update_weights`` does). The trainer's ``fit``, ``fit_step``, ``_fit_generate``,
``_fit_validate`` (asking the rollouter to validate every ``test_freq`` versions),
``_fit_update_local_step`` and ``_fit_postprocess_step`` are verl's; the run ends as verl's does, by a
``TrainingStopException`` when the queue closes.

Usage: python drive_async.py OUT_JSON
"""

import asyncio
import json
import sys
import time
from pathlib import Path

import numpy as np
import ray
import torch
from omegaconf import OmegaConf
from tqdm import tqdm
from verl import DataProto
from verl.experimental.fully_async_policy.detach_utils import MetricsAggregator
from verl.experimental.fully_async_policy.fully_async_rollouter import FullyAsyncRollouter
from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
from verl.experimental.fully_async_policy.message_queue import MessageQueue, MessageQueueClient
from verl.utils.profiler import marked_timer
from verl.utils.tracking import Tracking, ValidationGenerationsLogger

from helpers.ray import ray_init

import verl_otel.hooks.registry as registry
from verl_otel import runtime

PROMPTS, N, PER_STEP, STALENESS = 8, 2, 2, 1
MAX_REQUIRED = PER_STEP * (STALENESS + 1)

CONFIG = OmegaConf.create(
    {
        "trainer": {
            "project_name": "proj",
            "experiment_name": "exp",
            "total_epochs": 1,
            "resume_mode": "disable",
            "balance_batch": False,
            "test_freq": 2,
            "log_val_generations": 2,
            "logger": ["console"],
            "save_freq": -1,
            "esi_redundant_time": 0,
            "total_training_steps": PROMPTS // PER_STEP,
        },
        "global_profiler": {"steps": None},
        "actor_rollout_ref": {"rollout": {"n": N, "temperature": 1.0, "multi_turn": {"enable": False}}},
        "data": {"train_batch_size": 0},
        "async_training": {
            "trigger_parameter_sync_step": 1,
            "staleness_threshold": STALENESS,
            "require_batches": 1,
            "use_trainer_do_validate": False,
        },
    }
)


class StandInServers:
    """The rollout servers: what verl's generate_sequences_single returns for one prompt x n."""

    version = 0  # weights version, set by the 'checkpoint engine'

    async def generate_sequences_single(self, prompts: DataProto) -> DataProto:
        start = self.version
        await asyncio.sleep(0.05)
        n = len(prompts)
        return DataProto.from_dict(
            tensors={
                "responses": torch.ones(n, 3, dtype=torch.long),
                "attention_mask": torch.ones(n, 7, dtype=torch.long),
                "input_ids": torch.ones(n, 7, dtype=torch.long),
                "response_mask": torch.tensor([[1, 1, 0]] * n),
            },
            non_tensors={
                "min_global_steps": np.array([start] * n, dtype=object),
                # numpy ints, as an engine may report them: the hooks must read both kinds
                "max_global_steps": np.array([np.int64(self.version)] * n, dtype=object),
            },
            meta_info={"metrics": [{"generate_sequences": 0.05, "tool_calls": 0.0}] * n},
        )


def make_rollouter(client: MessageQueueClient, servers: StandInServers):
    r = object.__new__(FullyAsyncRollouter.__ray_metadata__.modified_class)
    r.config = CONFIG
    r._init_async_objects()
    r.train_dataloader = [
        {"input_ids": torch.full((1, 4), i), "raw_prompt": np.array([f"q{i}"], dtype=object)} for i in range(PROMPTS)
    ]
    r.async_rollout_manager = servers
    r.message_queue_client = client
    r.total_rollout_steps, r.global_steps = PROMPTS, 1
    r.required_samples, r.staleness_threshold = PER_STEP, STALENESS
    r.max_required_samples = r.max_queue_size = MAX_REQUIRED
    r.max_concurrent_samples = 2
    r.paused, r.running = False, True
    r.pending_queue, r.active_tasks = asyncio.Queue(maxsize=128), set()
    r.total_generated_samples = r.staleness_samples = r.dropped_stale_samples = r.processed_sample_count = 0
    r._step_generated_samples, r._completed_steps, r._STEP_HISTORY_SIZE = 0, 1, 10
    r._step_samples_history = __import__("collections").deque(maxlen=10)
    r.idle_start_time = r.step_start_time = time.time()
    r._active_count_history = [(time.time(), 0, 2)]
    r.validation_generations_logger = ValidationGenerationsLogger(project_name="proj", experiment_name="exp")

    def validate() -> dict:  # the validation dataset run itself; verl's own pick of generations to log
        r._maybe_log_val_generations(["q0", "q1", "q2"], ["a0", "a1", "a2"], [1.0, 0.0, 1.0])
        return {"val-core/score/mean": 1.0}

    r._validate = validate
    return r


def make_trainer(client: MessageQueueClient, rollouter):
    t = object.__new__(FullyAsyncTrainer.__ray_metadata__.modified_class)
    t.config, t.tokenizer = CONFIG, None
    t.message_queue_client, t.rollouter = client, rollouter
    t.required_samples, t.dynamic_schedule_enabled = PER_STEP, False
    t._step_wait_times, t._step_wait_samples = [], []
    t.global_steps, t.epoch, t.max_steps_duration = 0, 0, 0
    t.local_trigger_step, t.trigger_parameter_sync_step = 1, 1
    t.current_param_version = t.last_ckpt_version = t.stale_trajectory_processed = 0
    t.progress_bar = tqdm(total=PROMPTS // PER_STEP, disable=True)
    t.metrics_aggregator = MetricsAggregator(total_gpus=1)
    t.dynamic_resource_controller = None
    t._fit_start_profile = t._fit_stop_profile = lambda should_profiler: None
    for name in (
        "_fit_compute_reward",
        "_fit_compute_log_prob",
        "_fit_compute_ref_log_prob",
        "_fit_compute_critic",
        "_fit_compute_advantage",
        "_fit_update_critic",
        "_fit_dump_data",
        "_fit_collect_metrics",
    ):
        setattr(t, name, lambda batch: batch)  # PPO compute standing in
    return t


def async_gauges() -> dict[str, float]:
    return {
        m.name + (f"{{{','.join(labels)}}}" if labels else ""): v
        for m, labels, v in runtime.current().store.readings()
        if m.name.startswith("verl_async_")
    }


def own_metrics_page() -> tuple[str, dict]:
    """This process' /metrics page and its target labels, found the way Prometheus finds them (file_sd)."""
    import os
    import urllib.request

    from verl_otel.export.prometheus import PID_LABEL

    groups = json.loads((Path(os.environ["VERL_OTEL_DIR"]) / "prometheus_targets.json").read_text())
    (group,) = [g for g in groups if g["labels"].get(PID_LABEL) == str(os.getpid())]
    with urllib.request.urlopen(f"http://{group['targets'][0]}/metrics", timeout=10) as resp:
        return resp.read().decode(), group["labels"]


async def main(out_path: str) -> None:
    assert any("FullyAsyncRollouter" in k for k in registry.installed()), registry.installed()
    ray_init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    client = MessageQueueClient(MessageQueue.remote(CONFIG, MAX_REQUIRED))
    servers = StandInServers()
    rollouter = make_rollouter(client, servers)
    trainer = make_trainer(client, rollouter)
    logger = Tracking(project_name="proj", experiment_name="exp", default_backend=["console"])
    record: dict = {"steps": [], "syncs": []}

    async def update_weights() -> dict | None:
        # _fit_update_weights: checkpoint engine to the servers, then the rollouter's reset_staleness
        # the trainer's compute time, awaited: in verl the rollouter is another process and keeps going
        await asyncio.sleep(0.3)
        if trainer.local_trigger_step != 1:
            return None
        with marked_timer("timing_s/param_sync", trainer.timing_raw):
            servers.version = trainer.current_param_version
        before = async_gauges()
        timing = await rollouter.reset_staleness()
        record["syncs"].append(
            {
                "version": trainer.current_param_version,
                "verl_idle": timing["fully_async/rollouter/idle_ratio"],
                "gauges_before": before,
            }
        )
        logger.log(data=timing, step=trainer.current_param_version)
        return timing

    class RemoteRollouter:
        """What the trainer reaches through the rollouter actor handle."""

        class do_validate:  # noqa: N801 - ray's method.remote() shape
            @staticmethod
            async def remote():
                return rollouter.do_validate()

    # fully_async_main: load checkpoints, param sync before fit, validation before training
    trainer.timing_raw = {}
    rollouter.load_checkpoint()
    await update_weights()
    record["validate"] = rollouter.do_validate()

    def update_actor(batch: DataProto) -> DataProto:
        record["steps"].append(
            {
                "global_step": trainer.global_steps,
                "param_version": trainer.current_param_version,
                "start_versions": [int(v) for v in batch.non_tensor_batch["min_global_steps"][::N]],
                "end_versions": [int(v) for v in batch.non_tensor_batch["max_global_steps"][::N]],
                "gauges": async_gauges(),
            }
        )
        with marked_timer("update_actor", trainer.timing_raw):
            time.sleep(0.02)
        return batch

    trainer._fit_update_actor, trainer._fit_update_weights = update_actor, update_weights
    trainer.logger, trainer.rollouter = logger, RemoteRollouter()
    results = await asyncio.gather(rollouter.fit(), trainer.fit(), return_exceptions=True)
    record["errors"] = [repr(r) for r in results if isinstance(r, BaseException)]
    record["final_gauges"] = async_gauges()
    record["exposition"], record["target_labels"] = own_metrics_page()
    record["produced"] = rollouter.total_generated_samples
    ray.shutdown()
    with open(out_path, "w") as f:
        json.dump(record, f)
    print("DRIVE_ASYNC_DONE", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
