"""VERL_OTEL_CAPTURE_NEXT=1, verl's side (telemetry/next_profile.py arms the steps): at fit() start, whether verl's
profiler is set up, and the call that adds a step to its ``global_profiler.steps``.

verl builds each worker's profiler when the worker starts, so it cannot be switched on from a hook mid-run without
going around verl; the user sets it up with overrides (``verl-otel demo`` passes :func:`overrides`):
``global_profiler.tool=torch global_profiler.save_path=DIR`` and, for each role to profile,
``<role>.profiler.enable=true`` (``<role>.profiler.tool_config.torch.contents=[cpu]`` on a machine without GPUs:
verl's default adds CUDA activities). ``global_profiler.steps`` may stay unset: a list is put there at fit() start,
empty (nothing is profiled until a stall arms a step)."""

from __future__ import annotations

from typing import Any

from verl_otel import semconv as sc
from verl_otel._log import warn_once
from verl_otel.hooks import verl_objects as verl
from verl_otel.telemetry.next_profile import NextProfile

#: the training roles whose profiler verl starts at a profiled step (the rollout's engines have their own)
ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")
#: trainers whose fit() reads ``global_profiler.steps`` at every step's end (fully_async's reads it its own way)
_TRAINERS = (sc.TRAINER_LEGACY, sc.TRAINER_V1)


def overrides(save_path: str, cuda: bool, roles: tuple[str, ...] = ("actor_rollout_ref.actor", "critic")) -> list[str]:
    """verl's profiler set up for VERL_OTEL_CAPTURE_NEXT=1 (hydra overrides), no step profiled until one is armed."""
    contents = "[cuda]" if cuda else "[cpu]"
    return [
        "global_profiler.tool=torch",
        "global_profiler.steps=[]",
        f"global_profiler.save_path={save_path}",
        *[f"{role}.profiler.enable=true" for role in roles],
        *[f"{role}.profiler.tool_config.torch.contents={contents}" for role in roles],
    ]


def attach(trainer: Any, kind: str, profiles: NextProfile) -> None:
    """fit() starts (VERL_OTEL_CAPTURE_NEXT=1): a stall may arm the next step where verl's profiler is set up;
    else one line says what is missing."""
    profiles.detach()
    config = getattr(trainer, "config", None)
    tool = verl.config_value(config, "global_profiler.tool")
    enabled = [role for role in ROLES if verl.config_value(config, f"{role}.profiler.enable") is True]
    save_path = verl.config_value(config, "global_profiler.save_path")
    missing = []
    if kind not in _TRAINERS:
        missing.append(f"the {kind} trainer (legacy and v1 only)")
    if not tool:
        missing.append("global_profiler.tool=torch")
    if not enabled:
        missing.append("<role>.profiler.enable=true (e.g. actor_rollout_ref.actor)")
    if not save_path:
        missing.append("global_profiler.save_path=DIR")
    if missing:
        warn_once(
            "next-profile-setup",
            f"{sc.ENV_CAPTURE_NEXT}=1 but verl's profiler is not set up: {', '.join(missing)}; "
            "no next-step profiles (docs/guides/hangs.md)",
        )
        return
    prof = config.global_profiler  # type: ignore[union-attr]
    if prof.steps is None:  # verl reads it as "never": an empty list reads the same, and takes our steps
        prof.steps = []
    profiles.attach(lambda step: _add_step(prof, step), str(save_path))


def _add_step(prof: Any, step: int) -> None:
    """On the training thread, before verl's step end reads the list for the next step."""
    if step not in prof.steps:
        prof.steps.append(step)


__all__ = ["ROLES", "attach", "overrides"]
