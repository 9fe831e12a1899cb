"""A backend-neutral view of step traces: spans, grouped into one StepTrace per trainer step."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from verl_otel import semconv as sc


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    error: bool = False
    service: str = ""

    @property
    def seconds(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9


@dataclass
class Sample:
    index: int | None
    seconds: float
    worker: int | None


@dataclass
class StepTrace:
    trace_id: str
    global_step: int
    start_ns: int
    seconds: float
    service: str
    error: bool
    phases: dict[str, float] = field(default_factory=dict)  # summed: a phase may run several times a step
    phase_runs: dict[str, int] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)  # slowest first


def build_steps(spans: Iterable[Span]) -> list[StepTrace]:
    """One StepTrace per trace whose root is a ``step`` span."""
    by_trace: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    out = []
    for trace_id, trace in by_trace.items():
        roots = [s for s in trace if s.name == sc.SPAN_STEP and not s.parent_id]
        if not roots:
            continue
        root = roots[0]
        try:
            number = int(root.attributes.get(sc.ATTR_GLOBAL_STEP, -1))
        except (TypeError, ValueError):
            number = -1
        step = StepTrace(trace_id, number, root.start_ns, root.seconds, root.service, root.error)
        by_id = {s.span_id: s for s in trace}
        workers = {}
        for s in trace:
            if s.parent_id == root.span_id and s.name not in (sc.SPAN_ROLLOUT_WORKER, sc.SPAN_ROLLOUT_SAMPLE):
                step.phases[s.name] = step.phases.get(s.name, 0.0) + s.seconds
                step.phase_runs[s.name] = step.phase_runs.get(s.name, 0) + 1
            elif s.name == sc.SPAN_ROLLOUT_WORKER:
                workers[s.span_id] = s.attributes.get(sc.ATTR_WORKER_INDEX)
        for s in trace:
            if s.name == sc.SPAN_ROLLOUT_SAMPLE:
                parent = by_id.get(s.parent_id)
                worker = workers.get(parent.span_id) if parent is not None else None
                idx = s.attributes.get(sc.ATTR_SAMPLE_INDEX)
                step.samples.append(Sample(int(idx) if isinstance(idx, int) else None, s.seconds, worker))
        step.samples.sort(key=lambda x: x.seconds, reverse=True)
        out.append(step)
    out.sort(key=lambda st: (st.start_ns, st.global_step))
    return out
