"""A memory leak: a process whose resident memory (``verl_process_resident_memory_bytes``) keeps growing, in
both halves of the window (a one-time jump, e.g. a cache filled once, grows in one half only)."""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.dashboards.rule import Rule
from verl_otel.dashboards.thresholds import Thresholds, duration_seconds


def memory_rules(t: Thresholds) -> list[Rule]:
    rss = sc.PROCESS_RESIDENT_MEMORY.name
    window = duration_seconds(t.leak_window)
    half = f"{int(window // 2)}s"
    per_s = t.leak_mib_per_hour * 1048576 / 3600  # bytes per second
    half_growth = per_s * window / 2 / 4  # each half grew by at least a quarter of the rate's share
    return [
        Rule(
            "VerlMemoryLeak",
            f"deriv({rss}[{t.leak_window}]) > {per_s:.0f} "
            f"and ({rss} - {rss} offset {half}) > {half_growth:.0f} "
            f"and ({rss} offset {half} - {rss} offset {t.leak_window}) > {half_growth:.0f}",
            "15m",
            "warning",
            "{{ $labels.verl_process_role }} process {{ $labels.instance }}: resident memory keeps growing",
            f"This process' resident memory grew faster than {t.leak_mib_per_hour:g} MiB/h over {t.leak_window}, "
            "steadily (in both halves of the window): a leak that ends in the OOM killer. Common causes: "
            "tensors or batches kept across steps, an ever-growing list of metrics or samples, a Ray object ref "
            "held in a loop. The panel 'Resident memory by process' shows which process role.",
        ),
    ]
