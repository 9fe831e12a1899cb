"""Overhead on an accelerator: a real training loop on the GPU with verl-otel's calls at verl's call sites,
telemetry off vs on, side by side in one run (each variant in its own process, rounds alternated).

The loop is deliberately launch-bound (a deep stack of small layers, one small forward per rollout sample,
``.item()`` for every logged metric, as verl's logging syncs): there, time the Python thread loses to
telemetry (the span/metric calls, the exporter and /metrics threads holding the GIL) shows up as late
kernel launches. verl itself is not needed: the calls are the ones verl-otel's hooks make (the step
tracer's phase enter/exit for verl's timer names, the rollout tracker per sample, the metrics log).

Usage: python bench/gpu_step.py [--rounds 5] [--steps 20] [--samples 256] [--device cuda] [--in-process STEPS]
Last line: gpu_overhead_ratio <median on / median off> (gpu_inprocess_ratio with --in-process, the quieter figure).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import ClassVar

PHASES = ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights")
METRIC_KEYS = 150  # about what a verl GRPO step logs


class _Trainer:
    """Only what verl-otel reads from a trainer."""

    global_steps = 0
    total_training_steps = None
    config: ClassVar[dict] = {
        "trainer": {"project_name": "bench", "experiment_name": "gpu", "total_training_steps": 0},
        "data": {"train_batch_size": 64},
        "actor_rollout_ref": {"rollout": {"n": 8}},
    }


def _loop(steps: int, samples: int, device: str, alternate: bool = False) -> tuple[float, list[float], list[float]]:
    """Wall time of ``steps`` steps; with ``alternate`` (telemetry set up), blocks of 5 steps alternate
    between making verl-otel's calls and skipping them, and the per-step times of each come back."""
    import torch

    from verl_otel.config import enabled

    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    layers = [m for _ in range(16) for m in (torch.nn.Linear(512, 512), torch.nn.GELU())]
    actor = torch.nn.Sequential(*layers).to(device, dtype)
    rollout_copy = [p.detach().clone() for p in actor.parameters()]
    opt = torch.optim.AdamW(actor.parameters(), lr=1e-4, foreach=True)
    batch = torch.randn(256, 512, device=device, dtype=dtype)

    on = enabled()
    calling = on  # whether this step makes the calls (alternated in one process with ``alternate``)
    trainer = _Trainer()
    if on:
        from verl_otel import trackers
        from verl_otel.hooks import trainer as hooks

        TRACKER, TRACER = trackers.current().rollout, trackers.current().steps  # noqa: N806

        hooks.declare_run(trainer)
        hooks.start_fit(trainer, "bench")

    def phase(name: str) -> None:
        if name == "gen":
            for i in range(samples):  # one small forward per sample, as a server decodes per request
                tok = TRACKER.sample_started("train") if calling else 0
                with torch.no_grad():
                    actor(batch[i % 256 : i % 256 + 1])
                if calling:
                    TRACKER.sample_finished("train", tok, {"step": trainer.global_steps}, None)
        elif name in ("old_log_prob", "ref"):
            with torch.no_grad():
                actor(batch).float().mean()
        elif name in ("reward", "adv"):
            (batch.float().sum(-1) - batch.float().mean()).std()
        elif name == "update_actor":
            for mb in batch.split(64):
                actor(mb).float().pow(2).mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        elif name == "update_weights":
            with torch.no_grad():
                torch._foreach_copy_(rollout_copy, [p.detach() for p in actor.parameters()])

    def step(number: int) -> None:
        trainer.global_steps = number
        if calling:
            TRACER.phase_enter("step")
            TRACKER.batch_started("train", number, samples, None)
        for name in PHASES:
            token = TRACER.phase_enter(name) if calling else None
            phase(name)
            if calling:
                TRACER.phase_exit(token, None)
        out = actor(batch[:8]).float()
        metrics = {f"actor/k{i}": out[i % 8, i].item() for i in range(METRIC_KEYS)}  # .item() syncs, as verl's log
        metrics["actor/odd@name-/:x"] = float("nan")
        if calling:
            TRACER.metrics_logged(metrics, number)

    for n in range(1, 4):  # warm-up: CUDA context, kernels, allocator
        step(n)
    if device == "cuda":
        torch.cuda.synchronize()
    times: dict[bool, list[float]] = {True: [], False: []}
    t0 = time.perf_counter()
    for n in range(4, 4 + steps):
        if alternate:
            calling = (n - 4) // 5 % 2 == 0
        s0 = time.perf_counter()
        step(n)  # ends in .item(): the GPU has caught up
        times[calling].append(time.perf_counter() - s0)
    if device == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    if on:
        TRACER.fit_ended(None)
    return wall, times[True], times[False]


def _in_process(args: argparse.Namespace) -> None:
    """The foreground cost without between-process noise: the same process, GPU state and background
    threads; only whether the step makes verl-otel's calls alternates (blocks of 5 steps)."""
    tmp = Path(tempfile.mkdtemp(prefix="verl-otel-gpu-bench-"))
    os.environ.update(
        VERL_OTEL_ENABLED="1",
        VERL_OTEL_DIR=str(tmp),
        VERL_OTEL_PROMETHEUS_PORT="0",
        VERL_PROGRESS_LOG="1",
        VERL_OTEL_CONSOLE="1",
    )
    _, on, off = _loop(args.in_process, args.samples, args.device, alternate=True)
    med_on, med_off = statistics.median(on), statistics.median(off)
    print(f"{args.device} in-process: {len(on)} steps with the calls, {len(off)} without, alternating blocks of 5")
    print(
        f"  step median with {med_on * 1e3:.2f} ms, without {med_off * 1e3:.2f} ms, "
        f"difference {(med_on - med_off) * 1e3:.2f} ms"
    )
    print(f"gpu_inprocess_ratio {med_on / med_off:.4f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--device", default="cuda")
    ap.add_argument(
        "--in-process",
        type=int,
        default=0,
        metavar="STEPS",
        help="instead: one all-on process, blocks of 5 steps alternating calls on/off",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(f"GPU_WALL {_loop(args.steps, args.samples, args.device)[0]:.6f}", flush=True)
        return
    if args.in_process:
        _in_process(args)
        return

    from run import (  # first: it puts tests/ (the OTLP receiver) on the path
        bench_env,
        worker_wall,
    )

    from helpers.otlp_receiver import OtlpReceiver, free_port

    tmp = Path(tempfile.mkdtemp(prefix="verl-otel-gpu-bench-"))
    worker = [__file__, "--worker", "--steps", str(args.steps), "--samples", str(args.samples), "--device", args.device]
    with OtlpReceiver() as rx:
        variants = {
            "off": bench_env(VERL_OTEL_ENABLED="0"),
            "embedded": bench_env(VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp / "e"), VERL_OTEL_CONSOLE="1"),
            "all": bench_env(
                OTEL_EXPORTER_OTLP_ENDPOINT=rx.grpc_endpoint,
                VERL_OTEL_DIR=str(tmp / "a"),
                VERL_OTEL_PROMETHEUS_PORT="0",
                VERL_PROGRESS_LOG="1",
                VERL_OTEL_CONSOLE="1",
            ),
            "dead": bench_env(
                OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{free_port()}",
                VERL_OTEL_DIR=str(tmp / "d"),
                VERL_OTEL_CONSOLE="1",
            ),
        }
        walls: dict[str, list[float]] = {name: [] for name in variants}
        for r in range(args.rounds):
            for name, env in variants.items():
                walls[name].append(worker_wall(worker, env, "GPU_WALL"))
                print(f"round {r + 1} {name:9s} {walls[name][-1]:.3f}s", flush=True)
    base = statistics.median(walls["off"])
    print(
        f"{args.device}: {args.steps} steps x ({args.samples} sample forwards + {len(PHASES)} phases + "
        f"{METRIC_KEYS} logged metrics), median of {args.rounds} rounds"
    )
    for name, vals in walls.items():
        print(
            f"  {name:9s} {statistics.median(vals):.3f}s  ratio {statistics.median(vals) / base:.4f}  "
            f"(min {min(vals):.3f}s max {max(vals):.3f}s)"
        )
    print(f"gpu_overhead_ratio {statistics.median(walls['all']) / base:.4f}")


if __name__ == "__main__":
    main()
