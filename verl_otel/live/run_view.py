"""One frame of a running job, built from the flat series of all its processes: run progress, the
phases running now, rollout progress per agent-loop worker, actor/critic update progress, the last
logged training metrics and the phases' mean durations; :class:`History` keeps per-step values
across frames (a /metrics page only has the last step's)."""

from __future__ import annotations

import statistics
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from verl_otel import semconv as sc
from verl_otel.analysis import stall_records
from verl_otel.live.replicas import Replica, replicas_of
from verl_otel.live.sources import Scrape, Series

#: verl's step-time metric keys: ``timing_s/<verl timer>``
TIMING_PREFIX = "timing_s/"
STEP_KEY = "training/global_step"
HISTORY_STEPS = 200
#: the logged keys History's readers use (the phase table, the health signals' medians): a regex
HISTORY_KEYS = "timing_s/.+|training/global_step|actor/grad_norm|critic/score/mean"


@dataclass(frozen=True)
class RolloutWorkerProgress:
    rollout_worker: str
    mode: str
    completed: float
    expected: float
    inflight: float = 0.0
    oldest_inflight_s: float = 0.0
    elapsed_s: float | None = None
    eta_s: float | None = None
    host: str = ""  # the process' host (its target's verl_host label)

    @property
    def running(self) -> bool:
        return self.expected > 0 and self.completed < self.expected


@dataclass(frozen=True)
class UpdateProgress:
    role: str
    completed: float
    expected: float
    epoch: float | None = None
    eta_s: float | None = None


@dataclass
class RunView:
    source: str = ""
    targets: int = 0
    failed: list[str] = field(default_factory=list)
    run: str = ""  # project/experiment
    other_runs: list[str] = field(default_factory=list)
    step: float | None = None
    planned: float | None = None
    eta_s: float | None = None
    last_step_ts: float | None = None
    active: dict[str, float] = field(default_factory=dict)  # phase -> elapsed s (running now)
    stalls: dict[tuple[str, str], str] = field(default_factory=dict)  # (process role, phase) stalled now -> frame
    rollout_workers: list[RolloutWorkerProgress] = field(default_factory=list)
    updates: list[UpdateProgress] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # verl's last logged scalars
    phase_mean_s: dict[str, float] = field(default_factory=dict)  # from the duration histograms
    step_mean_s: float | None = None
    dropped: float = 0.0
    replicas: list[Replica] = field(default_factory=list)  # rollout servers (vLLM's pages); see ReplicaWatch
    hosts: dict[str, int] = field(default_factory=dict)  # host -> processes (targets) of the run on it
    stall_hosts: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (process role, phase) -> hosts
    gpu_split: dict[str, float] = field(default_factory=dict)  # the last finished step's GPU-seconds by bucket
    goodput: float | None = None  # ... and its goodput ratio
    tools: dict[str, ToolRow] = field(default_factory=dict)  # agent loops' tools: calls in flight, calls, failed

    @property
    def multi_host(self) -> bool:
        """The run spans more than one host: every process is shown with its host."""
        return len(self.hosts) > 1

    def totals(self, mode: str) -> tuple[float, float]:
        """Completed and expected samples of ``mode`` over all workers (the manager's total)."""
        rows = [w for w in self.rollout_workers if w.mode == mode]
        return sum(w.completed for w in rows), sum(w.expected for w in rows)

    def modes(self) -> list[str]:
        return sorted({w.mode for w in self.rollout_workers}, key=lambda m: (m != sc.MODE_TRAIN, m))

    def step_phases(self) -> dict[str, float]:
        """The last logged step's phase durations."""
        return phases_of(self.metrics)


def phases_of(metrics: dict[str, float]) -> dict[str, float]:
    """Phase durations from a step's logged metrics: verl's timing_s/<timer> keys, under our phase names."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        timer = key[len(TIMING_PREFIX) :] if key.startswith(TIMING_PREFIX) else None
        if timer in sc.VERL_TIMER_TO_PHASE:
            name = sc.VERL_TIMER_TO_PHASE[timer]
            out[name] = out.get(name, 0.0) + value
    return out


def _run_of(s: Series) -> str:
    project, experiment = s.labels.get(sc.LABEL_PROJECT, ""), s.labels.get(sc.LABEL_EXPERIMENT, "")
    return f"{project}/{experiment}" if project or experiment else ""


def _pick_run(series: list[Series]) -> tuple[str, list[str]]:
    """The run to show when a source holds several: the one whose last step ended most recently."""
    runs = sorted({_run_of(s) for s in series} - {""})
    if len(runs) <= 1:
        return (runs[0] if runs else ""), []
    last = dict.fromkeys(runs, -1.0)
    for s in series:
        if s.name == sc.TRAINING_LAST_STEP.name and _run_of(s) in last:
            last[_run_of(s)] = max(last[_run_of(s)], s.value)
    best = max(runs, key=lambda r: (last[r], r))
    return best, [r for r in runs if r != best]


def _max(values: list[float]) -> float | None:
    return max(values) if values else None


def build_view(scrape: Scrape, run: str | None = None) -> RunView:
    """The frame of one read. ``run`` (project/experiment) selects a run when the source holds several."""
    chosen, others = (run, []) if run else _pick_run(scrape.series)
    rows = [s for s in scrape.series if not chosen or _run_of(s) in (chosen, "")]
    view = RunView(
        source=scrape.source, targets=scrape.targets, failed=list(scrape.failed), run=chosen, other_runs=others
    )
    by_name: dict[str, list[Series]] = {}
    for s in rows:
        by_name.setdefault(s.name, []).append(s)

    def values(metric: sc.MetricDef, suffix: str = "") -> list[float]:
        return [s.value for s in by_name.get(metric.name + suffix, [])]

    view.step = _max(values(sc.TRAINING_STEP))
    view.planned = _max(values(sc.TRAINING_STEPS_PLANNED))
    view.eta_s = _max(values(sc.TRAINING_ETA))
    view.last_step_ts = _max(values(sc.TRAINING_LAST_STEP))
    view.dropped = sum(values(sc.OTEL_DROPPED))
    active = {s.labels.get(sc.LABEL_PHASE, "") for s in by_name.get(sc.PHASE_ACTIVE.name, []) if s.value >= 1}
    for s in by_name.get(sc.PHASE_ELAPSED.name, []):
        phase = s.labels.get(sc.LABEL_PHASE, "")
        if phase in active:
            view.active[phase] = max(view.active.get(phase, 0.0), s.value)
    for phase in active - set(view.active):
        view.active[phase] = 0.0
    for s in by_name.get(sc.STALL_ACTIVE.name, []):
        if s.value >= 1:
            key = (s.labels.get(sc.LABEL_PROCESS_ROLE, "?"), s.labels.get(sc.LABEL_PHASE, ""))
            view.stalls[key] = ""
            host = s.labels.get(sc.LABEL_HOST)
            if host and host not in view.stall_hosts.setdefault(key, []):
                view.stall_hosts[key].append(host)
    instances: dict[str, set[str]] = {}
    for s in rows:
        if s.labels.get(sc.LABEL_HOST):
            instances.setdefault(s.labels[sc.LABEL_HOST], set()).add(s.labels.get("instance", ""))
    view.hosts = {host: len(found) for host, found in sorted(instances.items())}
    view.rollout_workers = _rollout_workers(by_name)
    view.replicas = replicas_of(rows)
    view.updates = _updates(by_name)
    view.tools = _tools(by_name)
    # verl's scalars: the trainer's process logs them; take the freshest step's if several processes do
    for s in by_name.get(sc.TRAINING_METRIC.name, []):
        view.metrics[s.labels.get(sc.LABEL_KEY, "")] = s.value
    for s in by_name.get(sc.STEP_GPU_SECONDS.name, []):
        bucket = s.labels.get(sc.LABEL_BUCKET, "")
        view.gpu_split[bucket] = max(view.gpu_split.get(bucket, 0.0), s.value)
    view.goodput = _max(values(sc.GOODPUT_RATIO))
    view.phase_mean_s = _means(by_name, sc.PHASE_DURATION, sc.LABEL_PHASE)
    view.step_mean_s = _means(by_name, sc.STEP_DURATION, None).get("")
    return view


@dataclass
class ToolRow:
    inflight: float = 0.0
    calls: float = 0.0
    failed: float = 0.0


def _tools(by_name: dict[str, list[Series]]) -> dict[str, ToolRow]:
    """Per tool: its calls in flight now (summed over rollout workers) and its calls and failed calls so far."""
    rows: dict[str, ToolRow] = {}
    for s in by_name.get(sc.TOOL_CALLS_INFLIGHT.name, []):
        rows.setdefault(s.labels.get(sc.LABEL_TOOL, "?"), ToolRow()).inflight += s.value
    for s in by_name.get(sc.TOOL_CALL_SECONDS.name + "_count", []):
        row = rows.setdefault(s.labels.get(sc.LABEL_TOOL, "?"), ToolRow())
        row.calls += s.value
        row.failed += s.value if s.labels.get(sc.LABEL_OUTCOME) in sc.TOOL_FAILURES else 0.0
    return rows


def _rollout_workers(by_name: dict[str, list[Series]]) -> list[RolloutWorkerProgress]:
    fields_ = {
        sc.ROLLOUT_SAMPLES_COMPLETED.name: "completed",
        sc.ROLLOUT_SAMPLES_EXPECTED.name: "expected",
        sc.ROLLOUT_SAMPLES_INFLIGHT.name: "inflight",
        sc.ROLLOUT_OLDEST_INFLIGHT.name: "oldest_inflight_s",
        sc.ROLLOUT_ELAPSED.name: "elapsed_s",
        sc.ROLLOUT_ETA.name: "eta_s",
    }
    rows: dict[tuple[str, str, str, str], dict[str, float]] = {}
    for name, attr in fields_.items():
        for s in by_name.get(name, []):
            key = (
                s.labels.get("instance", ""),
                s.labels.get(sc.LABEL_ROLLOUT_WORKER, ""),
                s.labels.get(sc.LABEL_MODE, ""),
                s.labels.get(sc.LABEL_HOST, ""),
            )
            rows.setdefault(key, {})[attr] = s.value
    out = [
        RolloutWorkerProgress(
            rollout_worker=w,
            mode=m,
            completed=r.get("completed", 0.0),
            expected=r.get("expected", 0.0),
            inflight=r.get("inflight", 0.0),
            oldest_inflight_s=r.get("oldest_inflight_s", 0.0),
            elapsed_s=r.get("elapsed_s"),
            eta_s=r.get("eta_s"),
            host=h,
        )
        for (_inst, w, m, h), r in rows.items()
    ]
    return sorted(out, key=lambda w: (w.mode != sc.MODE_TRAIN, w.mode, _num(w.rollout_worker)))


def _num(text: str) -> tuple[int, str]:
    return (int(text), "") if text.isdigit() else (1 << 30, text)


def _updates(by_name: dict[str, list[Series]]) -> list[UpdateProgress]:
    rows: dict[str, dict[str, float]] = {}
    for metric, attr in (
        (sc.UPDATE_MINIBATCHES_COMPLETED, "completed"),
        (sc.UPDATE_MINIBATCHES_EXPECTED, "expected"),
        (sc.UPDATE_EPOCH, "epoch"),
        (sc.UPDATE_ETA, "eta_s"),
    ):
        for s in by_name.get(metric.name, []):
            rows.setdefault(s.labels.get(sc.LABEL_ROLE, ""), {})[attr] = s.value
    return [
        UpdateProgress(role, r.get("completed", 0.0), r.get("expected", 0.0), r.get("epoch"), r.get("eta_s"))
        for role, r in sorted(rows.items())
    ]


def _means(by_name: dict[str, list[Series]], metric: sc.MetricDef, label: str | None) -> dict[str, float]:
    """Mean of a duration histogram per ``label`` value, summed over processes."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for suffix, acc in (("_sum", sums), ("_count", counts)):
        for s in by_name.get(metric.name + suffix, []):
            key = s.labels.get(label, "") if label else ""
            acc[key] = acc.get(key, 0.0) + s.value
    return {k: sums.get(k, 0.0) / n for k, n in counts.items() if n > 0}


class History:
    """Per-step values seen across frames: each step's logged metrics, keyed by verl's own
    ``training/global_step`` (the step the metrics belong to), the last ``limit`` steps."""

    def __init__(self, limit: int = HISTORY_STEPS) -> None:
        self.limit = limit
        self.steps: OrderedDict[int, dict[str, float]] = OrderedDict()

    def add(self, view: RunView) -> None:
        self.add_metrics(view.metrics)

    def add_metrics(self, metrics: dict[str, float]) -> None:
        """One step's logged metrics (the step they belong to is their own training/global_step)."""
        raw = metrics.get(STEP_KEY)
        if raw is None or not float(raw).is_integer():
            return
        step = int(raw)
        self.steps[step] = {**self.steps.get(step, {}), **metrics}
        self.steps.move_to_end(step)
        while len(self.steps) > self.limit:
            self.steps.popitem(last=False)

    def series(self, key: str) -> list[float]:
        """``key``'s value per step, oldest first (steps that did not log it left out)."""
        return [m[key] for m in self.steps.values() if key in m]

    def median(self, key: str, exclude_last: bool = True) -> float | None:
        vals = self.series(key)
        vals = vals[:-1] if exclude_last else vals
        return statistics.median(vals) if vals else None

    def phase_rows(self, last: int) -> list[tuple[int, dict[str, float]]]:
        """(step, {phase: seconds}) of the last ``last`` steps, newest first."""
        rows = []
        for step, metrics in reversed(self.steps.items()):
            rows.append((step, step_row(metrics)))
            if len(rows) >= last:
                break
        return rows


def step_row(metrics: dict[str, float]) -> dict[str, float]:
    """One step's phase seconds from its logged metrics, with verl's own step time under ``step``."""
    row = phases_of(metrics)
    value = metrics.get(TIMING_PREFIX + sc.VERL_TIMER_STEP)
    return row if value is None else {**row, sc.SPAN_STEP: value}


def attach_stall_frames(view: RunView, stalls_dir: Path) -> None:
    """Where each stall shown is stuck, from the newest evidence file of its process role and phase (the
    run's $VERL_OTEL_DIR/stalls/, readable when top reads the run's targets file on its node)."""
    if not view.stalls:
        return
    for rec in stall_records.read_dir(stalls_dir):  # newest first
        key = (rec.process_role, rec.phase)
        if key in view.stalls and not view.stalls[key]:
            view.stalls[key] = rec.frame
