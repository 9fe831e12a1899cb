"""``--slow PHASE@STEP=SECONDS``: delays one phase of one step, inside the real worker or stand-in
that does that work, so slow steps can be shown (and tested). Carried to every process in
VERL_OTEL_DEMO_SLOW."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

ENV = "VERL_OTEL_DEMO_SLOW"
ENV_FIT_TIMES = "VERL_OTEL_DEMO_FIT_TIMES"  # a file each fit() of the demo appends its seconds to
#: where each slowable phase sleeps
PHASES = {
    "rollout": "the LLM server, every training request of that step (before vLLM sees it)",
    "rollout_sample": "one training request of that step, a long tail (vLLM: it decodes for that long)",
    "old_log_prob": "ActorRolloutRefWorker.compute_log_prob (in verl's FSDP engine, as each of these)",
    "ref": "ActorRolloutRefWorker.compute_ref_log_prob",
    "values": "TrainingWorker.infer_batch (critic)",
    "update_actor": "ActorRolloutRefWorker.update_actor",
    "update_critic": "TrainingWorker.train_mini_batch (critic)",
    "update_weights": "the weight transfer after that step's update: the demo checkpoint engine's first bucket send "
    "(separate_async), or the stand-in rollout's load of the first bucket (colocated: in the actor worker)",
    "tool": "the search tool's first call of that step (--agent tool; one call in the run)",
    "validate": "the stand-in LLM server, every validation request on that step's weights (the validation after its "
    "update): its engine works that long, off the event loop",
}
#: ``--hang PHASE@STEP=SECONDS``: blocks (a hang the stall detection catches, then lets go) where each phase works
HANG_ENV = "VERL_OTEL_DEMO_HANG"
HANG_PHASES = {
    "rollout": "the LLM server, the first training request of that step (vLLM: its engine stops, requests running)",
    "update_weights": "the weight transfer to the rollout after that step's update (the demo's checkpoint engine)",
    "reward": "the reward function (a custom one the demo configures: verl_otel/demo/hang_reward.py)",
    "old_log_prob": PHASES["old_log_prob"],
    "ref": PHASES["ref"],
    "update_actor": PHASES["update_actor"],
    "tool": "the search tool's first call of that step (--agent tool), awaiting a backend that does not answer",
}
_RE = re.compile(r"^(?P<phase>[a-z_]+)@(?P<step>\d+)=(?P<seconds>\d+(\.\d*)?)$")


@dataclass(frozen=True)
class SlowSpec:
    delays: dict[tuple[str, int], float] = field(default_factory=dict)

    @classmethod
    def parse(cls, specs: list[str], phases: dict[str, str] = PHASES, what: str = "--slow") -> SlowSpec:
        delays = {}
        for spec in specs:
            for part in filter(None, (p.strip() for p in spec.split(","))):
                m = _RE.match(part)
                if not m or m["phase"] not in phases:
                    raise ValueError(
                        f"bad {what} {part!r}: expected PHASE@STEP=SECONDS with PHASE one of {', '.join(phases)}"
                    )
                delays[(m["phase"], int(m["step"]))] = float(m["seconds"])
        return cls(delays)

    @classmethod
    def parse_hang(cls, specs: list[str]) -> SlowSpec:
        return cls.parse(specs, HANG_PHASES, "--hang")

    @classmethod
    def from_env(cls, env: str = ENV) -> SlowSpec:
        try:
            return cls.parse([os.environ.get(env, "")], HANG_PHASES if env == HANG_ENV else PHASES)
        except ValueError:
            return cls()

    def seconds(self, phase: str, step: int) -> float:
        return self.delays.get((phase, step), 0.0)

    def any(self, *phases: str) -> bool:
        return any(p in phases for p, _ in self.delays)

    def to_env(self) -> str:
        return ",".join(f"{p}@{s}={sec}" for (p, s), sec in self.delays.items())


class RequestDelays:
    """What ``--slow`` asks of a training request of a step, in the LLM server (the stand-in's or verl's vLLM
    server): ``rollout`` for every request of that step, ``rollout_sample`` (the long tail) for its first one
    only; ``validate`` for every validation request on that step's weights. Remembers at most one step per
    ``rollout_sample`` entry."""

    def __init__(self, spec: SlowSpec | None = None, hang: SlowSpec | None = None) -> None:
        self.spec = SlowSpec.from_env() if spec is None else spec
        self.hang = SlowSpec.from_env(HANG_ENV) if hang is None else hang
        self._tails: set[int] = set()
        self._hung: set[int] = set()

    def rollout_s(self, step: int) -> float:
        return self.spec.seconds("rollout", step)

    def validate_s(self, version: int) -> float:
        """``validate``: the extra seconds of a validation request on the weights of step ``version``."""
        return self.spec.seconds("validate", version)

    def tail_s(self, step: int) -> float:
        """The long tail's seconds for this request if it is the step's first to ask, else 0."""
        seconds = self.spec.seconds("rollout_sample", step)
        if not seconds or step in self._tails:
            return 0.0
        self._tails.add(step)
        return seconds

    def hang_s(self, step: int) -> float:
        """``--hang rollout@STEP``: the seconds the step's first training request blocks, else 0."""
        seconds = self.hang.seconds("rollout", step)
        if not seconds or step in self._hung:
            return 0.0
        self._hung.add(step)
        return seconds


def planted_hang(seconds: float) -> None:
    """The demo's hang (``--hang``): blocks the calling thread ``seconds``, then lets go."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
