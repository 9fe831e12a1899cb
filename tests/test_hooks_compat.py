"""Which hook targets resolve in the installed verl (CI: 0.9.1; `make verl-compat`: 0.8.0 and 0.9.0,
each in its own venv). The legacy trainer, the phase timer, the metrics log and the agent loop exist in
every supported version; the v1 trainer from 0.9.0 on. Nothing may raise, whatever is missing."""

import contextlib
import importlib

from packaging.version import Version

from verl_otel.hooks import registry
from verl_otel.hooks.targets import ALL_TARGETS, RAY_TARGETS

REQUIRED_ALWAYS = {
    "verl.utils.profiler.performance._timer",
    "verl.trainer.ppo.ray_trainer.RayPPOTrainer.fit",
    "verl.trainer.ppo.ray_trainer.RayPPOTrainer._validate",
    "verl.utils.tracking.Tracking.log",
    "verl.experimental.agent_loop.agent_loop.AgentLoopWorker._run_agent_loop",
    "verl.experimental.agent_loop.agent_loop.AgentLoopWorker.generate_sequences",
    "verl.workers.engine_workers.TrainingWorker.train_mini_batch",
}
REQUIRED_V1 = {
    "verl.trainer.ppo.v1.trainer_base.PPOTrainer.fit",
    "verl.trainer.ppo.v1.agent_loop_tq.AgentLoopWorkerTQ.__ray_metadata__.modified_class.generate_sequences",
}


def test_hook_targets_resolve_for_installed_verl(otel_log):
    version = Version(registry.verl_version())
    try:
        registry.install((*RAY_TARGETS, *ALL_TARGETS))
        for t in ALL_TARGETS:  # import every module so each post-import hook fires
            # a module of a newer verl, or of an engine not installed (verl's vLLM server raises ValueError
            # without vLLM; vLLM's own module is absent): its targets stay uninstalled
            with contextlib.suppress(ImportError, ValueError):
                importlib.import_module(t.module)
        installed = set(registry.installed())
    finally:
        registry.uninstall((*RAY_TARGETS, *ALL_TARGETS))
    assert installed >= REQUIRED_ALWAYS, sorted(REQUIRED_ALWAYS - installed)
    if version >= Version("0.9.0"):
        assert installed >= REQUIRED_V1, sorted(REQUIRED_V1 - installed)
    missing = [m for m in otel_log.messages() if "not found in verl" in m]
    print(f"verl {version}: {len(installed)} hooks installed; missing: {missing}")
    assert registry.installed() == []
