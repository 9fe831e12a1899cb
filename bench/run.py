"""`make bench`: overhead of verl-otel, side by side in one run.

1. Modeled realistic step (bench/modeled_step.py): verl's real timer/logger, sleeps for the compute,
   N samples through the rollout tracker; telemetry off vs the embedded default vs OTLP push to a
   local protocol-level receiver vs everything on (+ VERL_PROGRESS_LOG), and under faults (collector
   unreachable, collector answering after 3 s), alternated, several rounds.
2. The CPU demo's fit() (real verl, FSDP2 workers) with telemetry off vs on (--demo, slow: minutes).
3. Microbenchmarks (bench/micro.py), and the OTLP span buffer (bench/export_buffer.py): its cost per span on
   the happy path beside the SDK exporter's, and the time to drain a full buffer when the collector is back.

4. Runtime figures: step_end_us (foreground cost of ending a step with a 150-key metrics log, embedded
   default), startup_ms (extra import time of an enabled process that never imports verl),
   flush_threads_max and fit_end_blackhole_s (60 fast steps against a collector that accepts
   connections and never answers: our threads alive at once, and how long fit end blocks).

The last lines are: overhead_ratio <all-on / off>, span_us <µs>, progress_update_us <µs>, then
step_end_us, startup_ms, flush_threads_max, fit_end_blackhole_s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))


def bench_env(**extra: str) -> dict[str, str]:
    """This environment without any verl-otel/OTel setting (console off), then ``extra``: one variant."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_OTEL_", "OTEL_", "VERL_PROGRESS_"))}
    env["VERL_OTEL_CONSOLE"] = "0"
    env.update(extra)
    return env


def worker_wall(args: list[str], env: dict[str, str], marker: str) -> float:
    """Run a bench worker script in its own process; the seconds on its last ``marker`` line."""
    out = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=600)
    lines = [x for x in out.stdout.splitlines() if x.startswith(marker)]
    if out.returncode or not lines:
        raise SystemExit(
            f"{Path(args[0]).name} failed (rc {out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
        )
    return float(lines[-1].split()[1])


def modeled(env: dict[str, str], steps: int, step_s: float, samples: int) -> float:
    return worker_wall([str(HERE / "modeled_step.py"), str(steps), str(step_s), str(samples)], env, "MODELED_WALL")


def blackhole_run(steps: int = 60) -> dict[str, float]:
    """tests/drive_hooks.py (verl's real timer and Tracking.log) against a never-answering collector."""
    import json

    from helpers.bad_collectors import BadCollector

    with BadCollector("blackhole") as bad:
        out = subprocess.run(
            [sys.executable, str(HERE.parent / "tests" / "drive_hooks.py"), str(steps)],
            env=bench_env(
                OTEL_EXPORTER_OTLP_ENDPOINT=bad.endpoint,
                OTEL_METRIC_EXPORT_INTERVAL="500",
                VERL_OTEL_DIR=tempfile.mkdtemp(prefix="verl-otel-bench-"),
            ),
            capture_output=True,
            text=True,
            timeout=600,
        )
    lines = [x for x in out.stdout.splitlines() if x.startswith("DRIVE_STATS ")]
    if out.returncode or not lines:
        raise SystemExit(f"drive_hooks.py failed (rc {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1].split(" ", 1)[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--step-seconds", type=float, default=4.0)
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--demo", action="store_true", help="also compare the CPU demo's fit() off vs on (minutes)")
    args = ap.parse_args()

    from helpers.otlp_receiver import OtlpReceiver, free_port

    tmp = Path(tempfile.mkdtemp(prefix="verl-otel-bench-"))
    results: dict[str, list[float]] = {"off": [], "embedded": [], "otlp": [], "all": [], "dead": [], "slow": []}
    with OtlpReceiver() as rx, OtlpReceiver(delay_s=3.0) as slow_rx:
        variants = {
            "off": bench_env(VERL_OTEL_ENABLED="0"),
            "embedded": bench_env(VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp / "embedded")),
            "otlp": bench_env(OTEL_EXPORTER_OTLP_ENDPOINT=rx.grpc_endpoint, VERL_OTEL_DIR=str(tmp / "otlp")),
            "all": bench_env(
                OTEL_EXPORTER_OTLP_ENDPOINT=rx.grpc_endpoint,
                VERL_OTEL_DIR=str(tmp / "all"),
                VERL_OTEL_PROMETHEUS_PORT="0",
                VERL_PROGRESS_LOG="1",
                VERL_OTEL_CONSOLE="1",
            ),
            # faults: the collector unreachable, and one answering every export after 3 s
            "dead": bench_env(
                OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{free_port()}", VERL_OTEL_DIR=str(tmp / "d")
            ),
            "slow": bench_env(OTEL_EXPORTER_OTLP_ENDPOINT=slow_rx.grpc_endpoint, VERL_OTEL_DIR=str(tmp / "s")),
        }
        for r in range(args.rounds):
            for name, env in variants.items():
                results[name].append(modeled(env, args.steps, args.step_seconds, args.samples))
                print(f"round {r + 1} {name:9s} {results[name][-1]:.3f}s", flush=True)
    base = statistics.median(results["off"])
    print(
        f"modeled step: {args.steps} steps x {args.step_seconds}s, {args.samples} samples/step, "
        f"median of {args.rounds} rounds"
    )
    for name, vals in results.items():
        print(f"  {name:9s} {statistics.median(vals):.3f}s  ratio {statistics.median(vals) / base:.4f}")

    if args.demo:
        from demo_bench import demo_fit_ratio

        print(f"demo fit() ratio (on/off): {demo_fit_ratio(tmp):.4f}")

    import capture
    import micro

    fg, bg = micro.span_us()
    print(f"span_export_us {bg:.2f}")
    print(f"scrape_ms {micro.scrape_ms():.2f}")
    print(f"reward_record_us {micro.reward_record_us():.3f}")
    print(f"carry_us {micro.carry_us():.3f}")
    per_tensor, sync_end = micro.weight_sync_tensor_us()
    print(f"weight_sync_tensor_us {per_tensor:.3f} (the sync's spans at its end: {sync_end:.0f} µs)")
    client_us, server_us = micro.engine_carry_us()  # the server side needs vLLM (.venv-vllm/bin/python bench/run.py)
    print(f"engine_carry_us {client_us:.2f} (agent loop) {'n/a' if server_us is None else f'{server_us:.2f}'} (server)")
    import export_buffer

    ours_us, sdk_us, e2e_us = export_buffer.buffer_export_us()
    print(f"buffer_export_us {ours_us:.2f} (SDK exporter's export {sdk_us:.2f}, ours until received {e2e_us:.2f})")
    took, rate, n = export_buffer.drain_s()
    print(f"buffer_drain_s {took:.2f} (8 MB, {n} spans, {rate:.1f} MB/s)")
    print(f"overhead_ratio {statistics.median(results['all']) / base:.4f}")
    print(f"span_us {fg:.2f}")
    print(f"progress_update_us {micro.progress_update_us():.3f}")
    print(f"stall_watch_us {micro.stall_watch_us():.3f}")
    print(f"stall_dump_ms {micro.stall_dump_ms():.2f}")
    print(f"capture_slowdown_ratio {capture.capture_slowdown():.4f} (loop rate while py-spy samples / without)")
    stats = blackhole_run()
    print(f"step_end_us {micro.step_end_us():.1f}")
    import goodput

    print(f"goodput_step_us {goodput.goodput_step_us():.1f}")
    print(f"goodput_busy_join_us {goodput.goodput_busy_join_us():.1f} (the same with the GPUs' busy share joined)")
    print(f"startup_ms {micro.startup_ms():.1f}")
    print(f"flush_threads_max {stats['most_threads']}")
    print(f"fit_end_blackhole_s {stats['fit_end_s']:.2f}")


if __name__ == "__main__":
    main()
