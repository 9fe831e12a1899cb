"""`make bench` is not part of `make test` (figures, not pass/fail), so its microbenchmarks can drift from the
code they measure unseen (scrape_ms once read a tracker attribute a refactor had renamed). Each one runs
here once, with small sizes, in a process of its own (they set environment variables and reset the runtime)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"

CODE = f"""
import json, sys
sys.path.insert(0, {str(BENCH)!r})
import capture, export_buffer, micro
fg, bg = micro.span_us(n=20, rounds=2)
ours_us, sdk_us, _ = export_buffer.buffer_export_us(batch=32, rounds=2)
drain, _, _ = export_buffer.drain_s(mb=0.05, batch=32)
client_us, _ = micro.engine_carry_us(n=40)  # the server side needs vLLM
print("FIGURES " + json.dumps({{
    "span_us": fg, "span_export_us": bg,
    "step_end_us": micro.step_end_us(rounds=3, keys=10),
    "startup_ms": micro.startup_ms(repeats=1),
    "progress_update_us": micro.progress_update_us(n=200),
    "reward_record_us": micro.reward_record_us(n=200),
    "carry_us": micro.carry_us(n=200),
    "engine_carry_us": client_us,
    "scrape_ms": micro.scrape_ms(),
    "stall_watch_us": micro.stall_watch_us(n=200),
    "weight_sync_tensor_us": micro.weight_sync_tensor_us(n=200)[0],
    "stall_dump_ms": micro.stall_dump_ms(repeats=2),
    "capture_slowdown_ratio": capture.capture_slowdown(window_s=0.3, rounds=1),
    "buffer_export_us": ours_us, "sdk_export_us": sdk_us, "buffer_drain_s": drain,
}}))
"""


def test_every_microbenchmark_runs_on_the_current_code():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("FIGURES ")][-1]
    figures = json.loads(line.split(" ", 1)[1])
    bad = {k: v for k, v in figures.items() if not (isinstance(v, float) and math.isfinite(v) and v >= 0)}
    assert not bad, bad
