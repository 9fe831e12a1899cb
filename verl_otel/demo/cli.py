"""``verl-otel demo``: argparse glue for :func:`verl_otel.demo.runner.run_demo`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from verl_otel.cli.argtypes import positive_int
from verl_otel.demo.slow import PHASES, SlowSpec

# the demo's trainers (here, not in the runner: --help must not import verl)
TRAINERS = ("v1", "legacy", "colocate_async", "separate_async", "fully_async")


def _slow(text: str) -> str:
    """Checked while parsing, so a typo is reported at once (on stderr, exit 2), before verl is imported."""
    try:
        SlowSpec.parse([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text



def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("demo", help="run a real verl PPO/GRPO training on the CPU with telemetry on",
                       description="Runs verl's real trainer (python -m verl.trainer.main_ppo) on the CPU with a "
                                   "random-weight tiny model and a stand-in LLM server; telemetry is switched on "
                                   "by the environment, as in a user's run.")
    p.add_argument("--steps", type=positive_int, default=5)
    p.add_argument("--out", default="./verl-otel-data")
    p.add_argument("--trainer", choices=list(TRAINERS), default="v1",
                   help="v1: verl's default trainer (trainer.use_v1=true, sync); legacy: RayPPOTrainer; "
                        "colocate_async: the v1 trainer's colocated async mode; separate_async: its mode with "
                        "a standalone rollout replica fed by a (gloo) checkpoint engine; fully_async: verl's "
                        "experimental fully_async_policy (a rollouter and a trainer streaming through a queue)")
    p.add_argument("--adv", choices=["grpo", "gae"], default="grpo", help="gae adds verl's critic worker")
    p.add_argument("--slow", action="append", type=_slow, default=[], metavar="PHASE@STEP=SECONDS",
                   help="delay one phase of one step; PHASE: " + ", ".join(PHASES))
    p.add_argument("--test-freq", type=int, default=2, help="validate every K steps (and before training)")
    p.add_argument("--linger", type=float, default=0.0, metavar="SECONDS",
                   help="keep the run's processes (and their /metrics) up this long after training")
    return p


def run(args: argparse.Namespace) -> int:
    from verl_otel.demo.runner import run_demo

    try:
        return run_demo(steps=args.steps, out=args.out, trainer=args.trainer, slow=args.slow,
                        test_freq=args.test_freq, linger=args.linger, adv=args.adv)
    except ValueError as exc:
        print(f"verl-otel demo: {exc}", file=sys.stderr)
        return 2
