"""What the trackers take from their process' runtime, handed in through their constructors.

The trackers (this folder) never look the runtime up: ``verl_otel/trackers.py`` builds each object with the
:class:`Services` of its process, so a forked child's new runtime makes new objects and a test's reset
drops them all. Every call here never raises and never waits on export I/O, but ``flush_wait`` and
``spend`` (fit end only, within the process' shutdown budget).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry import trace

from verl_otel.config import Settings
from verl_otel.process.metrics import MetricStore

if TYPE_CHECKING:
    from verl_otel.process.stalls import StallWatch


@dataclass(frozen=True)
class Services:
    settings: Settings
    store: MetricStore
    tracer: Callable[[], trace.Tracer]  # called per span: the runtime makes its tracer on first use
    flush_soon: Callable[[], None]  # ask the flusher for an export (never blocks)
    flush_wait: Callable[..., bool]  # fit end: export and wait, within the shutdown budget
    stalls: Callable[[], StallWatch | None]  # the stall watch, None when off
    every_tick: Callable[[Callable[[], object]], None]  # a task for the flusher's tick (its thread, not ours)
    #: ``with preset_span_id(id):`` the next span this thread starts gets that id (the engine's samples)
    preset_span_id: Callable[[int | None], contextlib.AbstractContextManager[None]]
    declare: Callable[[str], None]  # what this process is (before its first span)
    budget_left_s: Callable[[], float]  # what is left of VERL_OTEL_SHUTDOWN_TIMEOUT
    spend: Callable[[Callable[[float], bool]], bool]  # a wait within that budget
