"""``ray.init`` that survives a loaded machine: Ray gives its raylet a fixed 30 s to register with the
GCS (ray/_private/node.py) and fails with "The current node timed out during startup" at load average
9-34. A failed start is retried (a bounded number of times) after shutting the half-started node down."""

from __future__ import annotations

import time
from typing import Any

STARTUP_TIMEOUT = "timed out during startup"


def ray_init(attempts: int = 3, **kwargs: Any) -> None:
    import ray

    for attempt in range(1, attempts + 1):
        try:
            ray.init(**kwargs)
            return
        except Exception as exc:  # Ray raises a bare Exception for this (re-raised unless a startup timeout)
            if STARTUP_TIMEOUT not in str(exc) or attempt == attempts:
                raise
            ray.shutdown()
            time.sleep(5 * attempt)
