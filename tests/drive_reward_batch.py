"""Drives verl's batch reward path (what a trainer with a colocated reward model runs inside its
``reward`` phase): the real ``RewardLoopManager.compute_rm_score`` -> real ``RewardLoopWorker`` Ray
actor -> ``compute_score`` per sample, with the gsm8k rule standing in for the reward model's score
(verl's own fallback without ``reward_model.enable``). Fresh process, activated by the environment
alone (the .pth start-up hook); the step and its phase come from verl's real timer.

Usage: python drive_reward_batch.py ASSET_DIR OUT_JSON
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import ray
import torch
import verl
from hydra import compose, initialize_config_dir
from verl import DataProto
from verl.experimental.reward_loop.reward_loop import RewardLoopManager
from verl.utils.profiler import marked_timer

from helpers.ray import ray_init

import verl_otel.hooks.registry as registry
from verl_otel import trackers
from verl_otel.hooks import trainer as trainer_hooks

STEP, SAMPLES = 3, 4


class TrainerState:
    """The attributes verl-otel reads from a trainer."""

    def __init__(self, config):
        self.config, self.global_steps = config, STEP


def batch(vocab_size: int) -> DataProto:
    prompts = torch.randint(4, vocab_size, (SAMPLES, 6))
    responses = torch.randint(4, vocab_size, (SAMPLES, 5))
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "attention_mask": torch.ones(SAMPLES, 11, dtype=torch.long),
        },
        non_tensors={
            "data_source": np.array(["openai/gsm8k"] * SAMPLES, dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": "3"}] * SAMPLES, dtype=object),
            "index": np.arange(SAMPLES),
        },
    )


def main(asset_dir: str, out_path: str) -> None:
    assert any("compute_rm_score" in k for k in registry.installed()), registry.installed()
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(
            "ppo_trainer",
            overrides=[
                f"actor_rollout_ref.model.path={asset_dir}/tiny_model",
                "reward.num_workers=1",
                "trainer.project_name=proj",
                "trainer.experiment_name=exp",
            ],
        )
    ray_init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    manager = RewardLoopManager(config)
    data = batch(vocab_size=100)
    keys_before = sorted(data.non_tensor_batch)

    trainer = TrainerState(config)
    trainer_hooks.declare_run(trainer)
    trainer_hooks.start_fit(trainer, "legacy")
    timing: dict = {}
    with marked_timer("step", timing), marked_timer("reward", timing):
        out = manager.compute_rm_score(data)
    trackers.current().steps.fit_ended(None)
    time.sleep(4)  # the reward-loop worker emits its group once idle (2 s)
    record = {
        "rm_scores_shape": list(out.batch["rm_scores"].shape),
        "keys_before": keys_before,
        "keys_after": sorted(data.non_tensor_batch),
    }
    ray.shutdown()
    Path(out_path).write_text(json.dumps(record))
    print("DRIVE_REWARD_BATCH_DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
