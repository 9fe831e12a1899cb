"""The cost of a capture on the captured process (export/captures.py): a Python process spinning through a loop
counts its iterations per window; ``py-spy record --nonblocking --idle`` (as a capture runs it) is attached for
some windows and not for the others, alternated. The figure is the loop's rate while sampled over its rate
while not (1.0: no slowdown)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from verl_otel.export.stall_evidence import find_py_spy

_SPIN = """
import sys, time
window = float(sys.argv[1])
while True:
    n, end = 0, time.monotonic() + window
    while time.monotonic() < end:
        n += 1
    print(n, flush=True)
"""


def capture_slowdown(window_s: float = 1.0, rounds: int = 4, rate_hz: int = 100) -> float:
    """Median loop rate in windows sampled by py-spy / median rate in windows that were not; nan without py-spy."""
    py_spy = find_py_spy()
    if not py_spy:
        return float("nan")
    spin = subprocess.Popen([sys.executable, "-c", _SPIN, str(window_s)], stdout=subprocess.PIPE, text=True)
    assert spin.stdout is not None
    try:
        spin.stdout.readline()  # warm-up window
        free, sampled = [], []
        for _ in range(rounds):
            free.append(int(spin.stdout.readline()))
            cmd = [py_spy, "record", "--pid", str(spin.pid), "--duration", str(max(1, round(window_s * 3)))]
            cmd += ["--rate", str(rate_hz), "--nonblocking", "--idle", "--format", "speedscope", "-o", "/dev/null"]
            rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)  # py-spy attached before the window counts
            spin.stdout.readline()  # the window it attached in
            sampled.append(int(spin.stdout.readline()))
            rec.wait(30)
            spin.stdout.readline()  # the window py-spy left in
        return statistics.median(sampled) / statistics.median(free)
    finally:
        spin.kill()
        spin.wait()


if __name__ == "__main__":
    print(f"capture_slowdown_ratio {capture_slowdown():.4f}")
