"""The console line of a stall (one per stall, from the stall watch's thread): what is stuck, for how long,
where, and the evidence file ``verl-otel doctor`` reads."""

from __future__ import annotations

import sys

from verl_otel import semconv as sc
from verl_otel.process.stalls import Stall


def stall_line(s: Stall) -> str:
    step = f" of step {s.step}" if s.step >= 0 else ""
    where = f" at {s.frame}" if s.frame else ""
    if s.waits_for:  # the calls it sent to other processes: whom it waits on
        where += f", waiting on {s.waits_for}"
    elif s.waiting_on:  # not the root of the hang: another process' call is (verl-otel doctor names it)
        where += f", waiting on {sc.STALL_WAIT_TEXT.get(s.waiting_on, s.waiting_on)}"
    evidence = f"; evidence: {s.evidence}" if s.evidence else ""
    return (
        f"[verl-otel] STALL: {s.call}{step} running {s.elapsed_s:.0f}s (threshold {s.threshold_s:.0f}s) in "
        f"{s.process_role} pid {s.pid} on {s.host}{where} [{s.kind}]{evidence} "
        "(verl-otel doctor: the hang's root and waiters)"
    )


def print_stall(s: Stall) -> None:
    print(stall_line(s), file=sys.stdout, flush=True)
