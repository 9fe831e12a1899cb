"""The CPU demo's fit() with telemetry off vs on, side by side (alternating runs). fit() time is the sum
of verl's own ``timing_s/step`` over the run's steps, parsed from verl's console log."""

from __future__ import annotations

import os
import re
import statistics
from pathlib import Path


def fit_seconds(log: str) -> float:
    return sum(float(x) for x in re.findall(r"timing_s/step:([0-9.]+)", log))


def demo_fit_ratio(tmp: Path, rounds: int = 2, steps: int = 4, trainer: str = "legacy") -> float:
    from verl_otel.demo.runner import run_demo

    times: dict[str, list[float]] = {"off": [], "on": []}
    for r in range(rounds):
        for variant in ("off", "on"):
            out = tmp / f"demo-{variant}-{r}"
            env = {"VERL_OTEL_ENABLED": "1" if variant == "on" else "0"}
            rc = run_demo(steps=steps, out=out, trainer=trainer, quiet=True, extra_env=env)
            if rc != 0:
                raise RuntimeError(f"demo failed ({variant}), see {out / 'demo.log'}")
            times[variant].append(fit_seconds((out / "demo.log").read_text(errors="replace")))
            print(f"demo round {r + 1} {variant}: fit steps {times[variant][-1]:.2f}s", flush=True)
    return statistics.median(times["on"]) / statistics.median(times["off"])


if __name__ == "__main__":
    import tempfile

    os.environ.pop("VERL_OTEL_ENABLED", None)
    print(f"demo fit() ratio (on/off): {demo_fit_ratio(Path(tempfile.mkdtemp())):.4f}")
