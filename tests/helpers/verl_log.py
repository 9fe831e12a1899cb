"""Reading verl's own console output in the demo log (behind Ray's ``(TaskRunner pid=..)`` prefix)."""

from __future__ import annotations

import re

_STEP_LINE = re.compile(r"(?:^|\s)step:(\d+) - (.*)$", re.M)


def step_metrics(log: str) -> dict[int, dict[str, float]]:
    """verl's per-step console line, ``step:N - key:value - ...``, as {step: {key: value}}."""
    out: dict[int, dict[str, float]] = {}
    for m in _STEP_LINE.finditer(log):
        metrics = out.setdefault(int(m[1]), {})
        for part in m[2].split(" - "):
            key, _, value = part.strip().rpartition(":")
            number = re.fullmatch(r"(?:np\.\w+\()?([-+0-9.eE]+|nan|inf)\)?", value)
            if key and number:
                metrics[key] = float(number[1])
    return out
