"""argparse types shared by the commands: numbers with a lower bound, refused while parsing (stderr, exit 2)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _number(kind: Callable[[str], float], ok: Callable[[float], bool], what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            x = kind(text)
        except ValueError:
            x = math.nan
        if not (math.isfinite(x) and ok(x)):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return x

    return parse


positive_int: Callable[[str], int] = _number(int, lambda x: x >= 1, "a positive integer")  # type: ignore[assignment]
non_negative_int: Callable[[str], int] = _number(int, lambda x: x >= 0, "a whole number >= 0")  # type: ignore[assignment]
positive_float: Callable[[str], float] = _number(float, lambda x: x > 0, "a positive number")
