"""RewardSpans' bookkeeping: per trainer span the call count and only the K slowest calls, emitted
once the group is idle (the span output itself is checked on the real runs in test_e2e_demo.py)."""

from __future__ import annotations

import time

from verl_otel.telemetry.reward_spans import RewardSpans


class Collecting(RewardSpans):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.emitted = []

    def _emit(self, parent, group):  # what would be exported
        self.emitted.append((parent, group.calls, group.errors, sorted(c.end_ns - c.start_ns for _, _, c in group.slowest),
                             group.first_ns, group.last_ns))


def test_keeps_the_k_slowest_and_counts_all(monkeypatch):
    monkeypatch.setattr("verl_otel.export.setup.get", lambda: type("T", (), {"flush_finished": lambda self: None})())
    spans = Collecting(max_spans=3, idle_s=0.2, background=False)
    durations = [5, 1, 9, 3, 7, 2, 8]
    for i, d in enumerate(durations):
        spans.record("tp-a", 1000 + i, 1000 + i + d, {}, RuntimeError("x") if d == 3 else None)
    spans.record("tp-b", 50, 60, {})
    assert spans.flush() == 0, "nothing is idle yet"
    time.sleep(0.3)
    spans.record("tp-b", 70, 75, {})  # b is busy again
    assert spans.flush() == 1
    parent, calls, errors, kept, first, last = spans.emitted[0]
    assert (parent, calls, errors, kept) == ("tp-a", 7, 1, [7, 8, 9])
    assert (first, last) == (1000, 1000 + 6 + 8)
    assert spans.flush(idle_only=False) == 1 and spans.emitted[1][:2] == ("tp-b", 2)


def test_zero_spans_still_counts(monkeypatch):
    monkeypatch.setattr("verl_otel.export.setup.get", lambda: type("T", (), {"flush_finished": lambda self: None})())
    spans = Collecting(max_spans=0, idle_s=0.0, background=False)
    spans.record("tp", 0, 5, {})
    spans.record("tp", 1, 9, {})
    assert spans.flush(idle_only=False) == 1
    assert spans.emitted[0][1:4] == (2, 0, [])


def test_background_flush_after_idle(monkeypatch):
    monkeypatch.setattr("verl_otel.export.setup.get", lambda: type("T", (), {"flush_finished": lambda self: None})())
    spans = Collecting(max_spans=2, idle_s=0.2)
    spans.record("tp", 0, 5, {})
    deadline = time.monotonic() + 3
    while not spans.emitted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [e[:2] for e in spans.emitted] == [("tp", 1)]
