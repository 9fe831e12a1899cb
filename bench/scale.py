"""`make bench-scale`: what a production-size run costs, side by side with a small one, in one run.

- scale_sample_us_1k/_10k/_100k: our cost per rollout sample in an agent-loop worker (the real hooks around each
  sample and its engine request, the batch's spans at its end) at 1k/10k/100k samples per step (one worker);
- scale_inflight_sample_us_1k/_10k/_100k: the same with every sample of the step in flight at once, as verl's
  worker runs them (gathered on an event loop): what the hook holds per sample in flight is walked by every full
  garbage collection;
- scale_trace_bytes_per_step_1k/_100k: bytes the trace file grows per step for that worker, its engine's
  ``llm_request`` spans included (the project's OTLP/JSON writer);
- scale_slow_steps_s_1gb/_rss_mb_1gb, scale_val_generations_s_1gb/_rss_mb_1gb: the readers on the rotated
  trace file set of a 1,000-step run (128 workers, 16 rollout servers), in a fresh process each;
- scale_jaeger_steps_1000_s/_rss_mb/_max_page_kb: ``slow-steps --jaeger`` over 1,000 step traces of the file set's
  shape in a real Jaeger (memory storage, sent to its OTLP port), in a fresh process: seconds, peak resident MB and
  the largest answer Jaeger sent it (skipped, saying so, without a Jaeger binary: `make stack-bin` builds it);
- scale_top_frame_ms_128w (and _1dead: one page never answers): one ``top`` frame over 128 /metrics pages on
  127.0.0.1 answering after 50 ms each;
- scale_series_128w: the run's Prometheus series with 128 agent-loop workers and 64 training ranks (the trainer
  with 150 metric keys after 1,000 steps);
- scale_rss_growth_mb: the trainer process' resident memory growth over 1,000 steps with 150 metric keys;
- scale_rollouter_sample_us_10k: our cost per sample in fully_async's rollouter process (the real hooks around each
  sample and each parameter sync) at 10k samples per parameter version;
- scale_rollouter_rss_growth_mb: the rollouter process' resident memory growth over 1,000 parameter versions
  (100 samples each), after 20;
- scale_sd_first_refresh_ms_256p/_refresh_ms_256p/_answer_kb_256p: the Ray driver's discovery of 32 nodes x 8
  processes (its first refresh writes the head's file_sd file; then the steady state) and its http_sd answer;
  scale_gather_s_32n/_mb_32n: `verl-otel gather`'s own work on 32 nodes' folders of a 1,000-step run (35 MB
  each), without Ray's transport (bench/scale_hosts.py).

``--small`` runs each at a tiny size (tests/test_bench_scale.py), printing the same names; ``--rollout`` runs only
the per-sample figures (1k/10k/100k, under a minute) and their ratio, and the same for samples of verl's tool agent
loop (3 turns of a generate call and a tool call each, all in flight, 1k and 100k).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _child(args: list[str], marker: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=1200)
    lines = [x for x in out.stdout.splitlines() if x.startswith(marker + " ")]
    if out.returncode or not lines:
        raise SystemExit(f"{args[0]} failed (rc {out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1].split(" ", 1)[1])


def _jaeger(small: bool) -> dict[str, float]:
    import scale_jaeger

    exe = scale_jaeger.jaeger_binary()
    if exe is None:
        print("scale_jaeger_*: skipped, no jaeger binary in .stack-bin or on PATH (`make stack-bin` builds it)")
        return {}
    run = {"steps": 20, "workers": 8, "replicas": 2} if small else {"steps": 1000, "workers": 128, "replicas": 16}
    jaeger = scale_jaeger.MemoryJaeger(exe)
    try:
        t0 = time.perf_counter()
        size = scale_jaeger.load_run(jaeger, **run)
        print(f"jaeger: {run}, {size / 2**20:.0f} MiB sent in {time.perf_counter() - t0:.1f}s", flush=True)
        seconds, rss, largest, compared = scale_jaeger.reader_cost(jaeger.url)
    finally:
        jaeger.stop()
    if compared != run["steps"]:
        raise SystemExit(f"slow-steps --jaeger compared {compared} steps of {run['steps']}")
    print(f"slow-steps --jaeger: {compared} steps; goal: resident <= 300 MB, largest answer <= 16 MiB + one trace")
    return {
        "scale_jaeger_steps_1000_s": seconds,
        "scale_jaeger_rss_mb": rss,
        "scale_jaeger_max_page_kb": largest / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="tiny sizes: checks that every figure is made")
    ap.add_argument("--rollout", action="store_true", help="only the per-sample figures and their ratio")
    opts = ap.parse_args()
    small = opts.small
    import scale_readers as readers

    figures: dict[str, float] = {}
    sizes = {"1k": 100, "10k": 300, "100k": 1000} if small else {"1k": 1000, "10k": 10_000, "100k": 100_000}
    for label, n in sizes.items():
        steps = max(2, min(30, 30_000 // n))  # best of several where a step is short (1k samples: ~20 ms)
        got = _child([str(HERE / "scale_rollout.py"), str(n), str(steps), "1"], "SCALE_ROLLOUT")
        print(f"rollout {n} samples/step: {json.dumps(got)}", flush=True)
        figures[f"scale_sample_us_{label}"] = got["sample_us"]
        if label != "10k":
            figures[f"scale_trace_bytes_per_step_{label}"] = got["bytes_per_step"]
        worker_series = got["series"]
    for label, n in sizes.items():
        steps = max(2, min(30, 30_000 // n))
        got = _child([str(HERE / "scale_rollout.py"), str(n), str(steps), "1", "in-flight"], "SCALE_ROLLOUT")
        print(f"rollout {n} samples/step, all in flight: {json.dumps(got)}", flush=True)
        figures[f"scale_inflight_sample_us_{label}"] = got["sample_us"]
    if opts.rollout:
        agent = {}  # verl's tool agent loop: 3 turns of a generate call and a tool call per sample, all in flight
        for label in ("1k", "100k"):
            n = sizes[label]
            got = _child([str(HERE / "scale_rollout.py"), str(n), str(max(2, min(30, 30_000 // n))), "1", "in-flight",
                          "agent"], "SCALE_ROLLOUT")  # fmt: skip
            print(f"rollout {n} agent samples/step (3 turns, 3 tool calls), all in flight: {json.dumps(got)}")
            agent[label] = got["sample_us"]
        print(f"agent_inflight_sample cost 100k/1k: {agent['100k'] / max(1e-9, agent['1k']):.2f} (goal <= 1.3)")
        for kind in ("sample", "inflight_sample"):
            ratio = figures[f"scale_{kind}_us_100k"] / max(1e-9, figures[f"scale_{kind}_us_1k"])
            print(f"{kind} cost 100k/1k: {ratio:.2f} (goal <= 1.3)")
        for name, value in figures.items():
            print(f"{name} {value:.2f}")
        return

    steps, keys = (40, 10) if small else (1000, 150)
    trainer = _child([str(HERE / "scale_trainer.py"), "trainer", str(steps), str(keys)], "SCALE_TRAINER")
    rank = _child([str(HERE / "scale_trainer.py"), "rank"], "SCALE_TRAINER")
    print(f"trainer {steps} steps x {keys} keys: {json.dumps(trainer)}; training rank: {json.dumps(rank)}")
    figures["scale_series_128w"] = trainer["series_end"] + 128 * worker_series + 64 * rank["series"]
    figures["scale_rss_growth_mb"] = trainer["rss_end_mb"] - trainer["rss_warm_mb"]

    versions, per_version = (3, 300) if small else (3, 10_000)
    got = _child([str(HERE / "scale_rollouter.py"), str(versions), str(per_version), str(versions)], "SCALE_ROLLOUTER")
    print(f"rollouter {versions} versions x {per_version} samples: {json.dumps(got)}", flush=True)
    figures["scale_rollouter_sample_us_10k"] = got["sample_us"]
    versions, per_version = (40, 20) if small else (1000, 100)
    got = _child([str(HERE / "scale_rollouter.py"), str(versions), str(per_version), "0"], "SCALE_ROLLOUTER")
    print(f"rollouter {versions} versions x {per_version} samples: {json.dumps(got)}", flush=True)
    figures["scale_rollouter_rss_growth_mb"] = got["rss_end_mb"] - got["rss_warm_mb"]

    tmp = Path(tempfile.mkdtemp(prefix="verl-otel-scale-"))
    try:
        t0 = time.perf_counter()
        run = {"steps": 5, "workers": 8, "replicas": 2} if small else {"steps": 1000, "workers": 128, "replicas": 16}
        size = readers.write_run(tmp, **run)
        print(f"trace file set: {run}, {size / 2**20:.0f} MiB written in {time.perf_counter() - t0:.1f}s", flush=True)
        for command in ("slow-steps", "val-generations"):
            seconds, rss = readers.reader_cost(command, tmp / "traces.jsonl")
            name = command.replace("-", "_")
            figures[f"scale_{name}_s_1gb"], figures[f"scale_{name}_rss_mb_1gb"] = seconds, rss
        pages = 8 if small else 128
        figures["scale_top_frame_ms_128w"], _ = readers.top_frame_ms(tmp, pages)
        figures["scale_top_frame_ms_128w_1dead"], _ = readers.top_frame_ms(tmp, pages, dead=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    figures.update(_jaeger(small))
    hosts = _child([str(HERE / "scale_hosts.py"), *(["small"] if small else [])], "SCALE_HOSTS")
    print(f"hosts: {json.dumps(hosts)}", flush=True)
    for name in ("sd_first_refresh_ms", "sd_refresh_ms", "sd_answer_kb"):
        figures[f"scale_{name}_256p"] = hosts[name]
    figures["scale_gather_s_32n"], figures["scale_gather_mb_32n"] = hosts["gather_s"], hosts["gather_mb"]

    ratio_us = figures["scale_sample_us_100k"] / max(1e-9, figures["scale_sample_us_1k"])
    ratio_flight = figures["scale_inflight_sample_us_100k"] / max(1e-9, figures["scale_inflight_sample_us_1k"])
    ratio_bytes = figures["scale_trace_bytes_per_step_100k"] / max(1.0, figures["scale_trace_bytes_per_step_1k"])
    print(f"sample cost 100k/1k: {ratio_us:.2f}, all in flight {ratio_flight:.2f} (goal <= 1.3); ", end="")
    print(f"trace bytes 100k/1k: {ratio_bytes:.2f} (goal <= 1.2)")
    for name, value in figures.items():
        print(f"{name} {value:.2f}" if isinstance(value, float) else f"{name} {value}")


if __name__ == "__main__":
    main()
