"""One step laid out in time for ``verl-otel timeline``: the driver's phases, a lane per training rank, per rollout
replica and per agent-loop worker (from each span's process: its resource's process role, host and pid, and the rank or
index its spans carry), the slowest samples on their lanes (the rest counted, not drawn), the idle stretches by
bucket, and the buckets' totals: the step span's own GPU-time buckets where the run recorded them, else stretches
derived here from the spans (the page says which)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from verl_otel import semconv as sc
from verl_otel.analysis.step_traces import Span, as_float, as_int

# derived buckets (a trace without the accounting): what a lane was waiting for in a stretch without a span
BUCKET_IDLE = "idle"  # the driver between its phases (advantages, reward on the CPU, data loading)
BUCKET_LONG_TAIL = "long_tail"  # a rollout lane done while the rollout phase still runs
BUCKET_WAITING = "waiting"  # a training rank without a call while the step runs

GROUP_RANK, GROUP_REPLICA, GROUP_AGENT, GROUP_OTHER = "training rank", "rollout replica", "agent-loop worker", "other"
GROUPS = (GROUP_RANK, GROUP_REPLICA, GROUP_AGENT, GROUP_OTHER)  # the page's order, top to bottom
SAMPLES_DRAWN = 200  # the slowest samples drawn on their lanes; the rest are counted per lane
LANES_PER_GROUP = 256  # lanes drawn per group (a 64-node run has 512 ranks): the rest are counted
BARS_PER_LANE = 400  # calls drawn per lane; the rest are merged into the last one drawn
_MIN_GAP_NS = 1_000_000  # a gap under 1 ms between two calls is no idle stretch


@dataclass(frozen=True, slots=True)
class Bar:
    name: str
    start_ns: int
    end_ns: int
    detail: str = ""  # the tooltip's line
    error: bool = False

    @property
    def seconds(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9


@dataclass
class Lane:
    group: str
    label: str
    bars: list[Bar] = field(default_factory=list)  # its calls (phases for the driver)
    samples: list[Bar] = field(default_factory=list)  # the slowest samples it ran, of those drawn
    idle: list[Bar] = field(default_factory=list)  # stretches without a call, ``name`` = bucket
    samples_not_drawn: int = 0  # samples it ran that are not drawn (below the slowest N, or not spanned)
    bars_merged: int = 0


@dataclass
class Timeline:
    step: int
    trace_id: str
    service: str
    start_ns: int
    end_ns: int
    driver: Lane
    lanes: list[Lane]
    lanes_not_drawn: dict[str, int] = field(default_factory=dict)  # group -> lanes left out
    #: bucket -> GPU-seconds from the step span (``measured``), or seconds of the lanes' derived stretches
    buckets: dict[str, float] = field(default_factory=dict)
    gpu_seconds: float | None = None  # the step's GPU-seconds, where the step span says
    measured: bool = False  # the buckets are the run's own accounting (step span attributes)
    busy: dict[str, float] = field(default_factory=dict)  # bucket -> its GPUs' measured busy share, where measured
    samples_total: int = 0  # the samples the step's rollout.worker spans say they ran
    samples_drawn: int = 0

    @property
    def seconds(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9


def find_root(spans: Iterable[Span], step: int, service: str = "") -> Span | None:
    """The ``step`` root span of global step ``step`` (of ``service``, if given): the latest, when a data folder
    holds the step twice (a rerun)."""
    best: Span | None = None
    for s in spans:
        if s.name != sc.SPAN_STEP or s.parent_id or (service and s.service not in ("", service)):
            continue
        if as_int(s.attributes.get(sc.ATTR_GLOBAL_STEP)) == step and (best is None or s.start_ns > best.start_ns):
            best = s
    return best


def build(spans: list[Span], step: int, service: str = "", samples_drawn: int = SAMPLES_DRAWN) -> Timeline | None:
    """The timeline of step ``step`` from the spans of its trace (others are ignored); None without its root."""
    root = find_root(spans, step, service)
    if root is None:
        return None
    mine = list({s.span_id: s for s in spans if s.trace_id == root.trace_id}.values())
    driver = Lane(GROUP_OTHER, "driver: phases")
    lanes: dict[tuple[str, str], Lane] = {}
    parents = {s.span_id: s for s in mine}
    workers: dict[str, Lane] = {}  # rollout.worker span id -> its lane
    sample_spans: list[tuple[Span, Lane]] = []
    total_samples = 0
    for s in sorted(mine, key=lambda x: x.start_ns):
        if s is root:
            continue
        if _is_phase(s, root):
            driver.bars.append(Bar(s.name, s.start_ns, s.end_ns, f"{s.name} {s.seconds:.3f} s", s.status_error))
            continue
        lane = _lane_of(s, lanes)
        if lane is None:
            continue
        if s.name == sc.SPAN_ROLLOUT_WORKER:
            workers[s.span_id] = lane
            n = as_int(s.attributes.get(sc.ATTR_SAMPLES)) or 0
            total_samples += n
            spanned = as_int(s.attributes.get(sc.ATTR_SAMPLES_SPANNED))
            lane.samples_not_drawn += max(0, n - (spanned if spanned is not None else 0))
            mode = s.attributes.get(sc.ATTR_MODE)
            lane.bars.append(Bar(f"rollout ({mode or sc.MODE_TRAIN})", s.start_ns, s.end_ns, f"{n} samples"))
        elif s.name == sc.SPAN_ROLLOUT_SAMPLE:
            sample_spans.append((s, workers.get(s.parent_id) or lane))
        elif s.name == sc.SPAN_ENGINE_REQUEST or s.name in sc.NON_PHASE_SPANS:
            parent = parents.get(s.parent_id)
            phase = parent.name if parent is not None and sc.ATTR_PHASE in parent.attributes else ""
            lane.bars.append(Bar(s.name, s.start_ns, s.end_ns, _detail(s, phase), s.status_error))
    _draw_samples(sample_spans, samples_drawn)
    tl = Timeline(step, root.trace_id, root.service, root.start_ns, root.end_ns, driver, [])
    tl.samples_total = max(total_samples, len(sample_spans))
    tl.samples_drawn = sum(len(lane.samples) for lane in lanes.values())
    for group in GROUPS:
        mine_g = sorted((v for (g, _), v in lanes.items() if g == group), key=lambda v: _order(v.label))
        tl.lanes += mine_g[:LANES_PER_GROUP]
        if len(mine_g) > LANES_PER_GROUP:
            tl.lanes_not_drawn[group] = len(mine_g) - LANES_PER_GROUP
    for lane in (driver, *tl.lanes):
        _bound(lane)
    _derive_idle(tl)
    _buckets(tl, root)
    return tl


def _is_phase(s: Span, root: Span) -> bool:
    if s.name in sc.NON_PHASE_SPANS or s.name == sc.SPAN_ENGINE_REQUEST:
        return False
    return sc.ATTR_PHASE in s.attributes or s.parent_id == root.span_id


def _index(s: Span, process_role: str) -> int | None:
    """A process' index within its process role: the key named for that process role, else the old key."""
    key = sc.INDEX_OF_PROCESS_ROLE.get(process_role)
    found = as_int(s.resource.get(key)) if key else None
    return as_int(s.resource.get(sc.RES_DEPRECATED_WORKER_INDEX)) if found is None else found


def _lane_of(s: Span, lanes: dict[tuple[str, str], Lane]) -> Lane | None:
    """The lane of the process that made ``s`` (made on first use); None for the driver's own spans."""
    process_role = str(s.resource.get(sc.RES_PROCESS_ROLE) or "")
    host, pid = str(s.resource.get(sc.RES_NODE) or ""), str(s.resource.get(sc.RES_PID) or "")
    where = f" ({host} pid {pid})" if host or pid else ""
    rank = as_int(s.attributes.get(sc.ATTR_WORKER_RANK))
    if s.name == sc.SPAN_ENGINE_REQUEST or process_role == sc.PROCESS_ROLE_ROLLOUT_SERVER:
        replica = as_int(s.attributes.get(sc.ATTR_ENGINE_REPLICA))
        if replica is None:
            replica = _index(s, process_role)
        group, label = GROUP_REPLICA, f"replica {'?' if replica is None else replica}"
    elif process_role == sc.PROCESS_ROLE_REPLICA_WORKER:
        index = _index(s, process_role)
        group, label = GROUP_REPLICA, f"replica worker {'?' if index is None else index}"
    elif process_role == sc.PROCESS_ROLE_WORKER or rank is not None:
        group, label = GROUP_RANK, f"rank {'?' if rank is None else rank}"
    elif process_role == sc.PROCESS_ROLE_AGENT_LOOP or s.name in (sc.SPAN_ROLLOUT_WORKER, sc.SPAN_ROLLOUT_SAMPLE):
        index = as_int(s.attributes.get(sc.ATTR_WORKER_INDEX))
        if index is None:
            index = _index(s, process_role)
        group, label = GROUP_AGENT, f"agent-loop worker {'?' if index is None else index}"
    elif process_role in ("", sc.PROCESS_ROLE_TRAINER, sc.PROCESS_ROLE_DRIVER):
        return None  # the driver's spans that are no phase (stall spans, ...): its lane shows the phases
    else:
        group, label = GROUP_OTHER, process_role.replace("_", " ")
    # a process keys its lane (a rank's first span may not say its rank: weights.sync); the first rank names it
    key = (group, f"{group}{where}") if where else (group, label)
    lane = lanes.get(key)
    if lane is None:
        lane = lanes[key] = Lane(group, f"{label}{where}")
    elif group == GROUP_RANK and rank is not None and lane.label.startswith("rank ?"):
        lane.label = f"{label}{where}"
    return lane


def _detail(s: Span, phase: str) -> str:
    parts = [f"{s.name} {s.seconds:.3f} s"]
    if phase:
        parts.append(f"in {phase}")
    method = s.attributes.get(sc.ATTR_WORKER_METHOD)
    if method:
        parts.append(f"method {method}")
    return ", ".join(parts)


def _draw_samples(spans: list[tuple[Span, Lane]], n: int) -> None:
    """The ``n`` slowest samples go on their lanes; each lane counts the rest it ran."""
    spans.sort(key=lambda p: p[0].end_ns - p[0].start_ns, reverse=True)
    for i, (s, lane) in enumerate(spans):
        if i >= n:
            lane.samples_not_drawn += 1
            continue
        index = as_int(s.attributes.get(sc.ATTR_SAMPLE_INDEX))
        label = f"sample #{'?' if index is None else index}"
        lane.samples.append(Bar(label, s.start_ns, s.end_ns, f"{label} {s.seconds:.3f} s", s.status_error))


def _order(label: str) -> tuple[str, int, str]:
    head, _, rest = label.partition(" (")
    words = head.rsplit(" ", 1)
    num = as_int(words[-1]) if len(words) == 2 else None
    return (words[0], -1 if num is None else num, rest)


def _bound(lane: Lane) -> None:
    lane.bars.sort(key=lambda b: b.start_ns)
    if len(lane.bars) > BARS_PER_LANE:
        rest = lane.bars[BARS_PER_LANE - 1 :]
        merged = Bar(
            f"{len(rest)} more calls", rest[0].start_ns, max(b.end_ns for b in rest), f"{len(rest)} calls merged"
        )
        lane.bars, lane.bars_merged = [*lane.bars[: BARS_PER_LANE - 1], merged], len(rest)


def _busy(bars: Iterable[Bar]) -> list[tuple[int, int]]:
    """The union of the bars' intervals, in order."""
    out: list[tuple[int, int]] = []
    for b in sorted(bars, key=lambda x: x.start_ns):
        if out and b.start_ns <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b.end_ns))
        else:
            out.append((b.start_ns, b.end_ns))
    return out


def _gaps(busy: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    out, t = [], start
    for a, b in busy:
        if a - t >= _MIN_GAP_NS:
            out.append((t, min(a, end)))
        t = max(t, b)
    if end - t >= _MIN_GAP_NS:
        out.append((t, end))
    return [(a, b) for a, b in out if b > a]


def _derive_idle(tl: Timeline) -> None:
    """The stretches without a span: the driver between phases; a rollout lane done before the rollout phase
    (the long tail) or before its first call; a training rank without a call."""
    top = list(tl.driver.bars)
    for a, b in _gaps(_busy(top), tl.start_ns, tl.end_ns):
        tl.driver.idle.append(Bar(BUCKET_IDLE, a, b, f"driver between phases {(b - a) / 1e9:.3f} s"))
    rollouts = _busy(b for b in top if b.name == sc.PHASE_ROLLOUT)
    for lane in tl.lanes:
        busy = _busy([*lane.bars, *lane.samples])
        if lane.group in (GROUP_AGENT, GROUP_REPLICA):
            for r0, r1 in rollouts:
                inside = [(max(a, r0), min(b, r1)) for a, b in busy if b > r0 and a < r1]
                for a, b in _gaps(inside, r0, r1):
                    bucket = BUCKET_LONG_TAIL if inside and a >= inside[-1][1] else BUCKET_WAITING
                    lane.idle.append(Bar(bucket, a, b, f"{bucket} {(b - a) / 1e9:.3f} s"))
        elif lane.group == GROUP_RANK:
            for a, b in _gaps(busy, tl.start_ns, tl.end_ns):
                lane.idle.append(Bar(BUCKET_WAITING, a, b, f"no call {(b - a) / 1e9:.3f} s"))


def _buckets(tl: Timeline, root: Span) -> None:
    # the step span's GPU-time accounting (telemetry/goodput.py): one GPU-seconds attribute per bucket
    attrs = root.attributes
    measured = {b: v for b in sc.BUCKETS if (v := as_float(attrs.get(sc.ATTR_GOODPUT_PREFIX + b))) is not None}
    if measured:
        tl.buckets, tl.measured = dict(sorted(measured.items(), key=lambda kv: -kv[1])), True
        tl.gpu_seconds = as_float(attrs.get(sc.ATTR_STEP_GPU_SECONDS))
        tl.busy = {b: v for b in measured if (v := as_float(attrs.get(sc.busy_attr(b)))) is not None}
        return
    totals: dict[str, float] = defaultdict(float)
    for lane in (tl.driver, *tl.lanes):
        for b in lane.idle:
            totals[b.name] += b.seconds
        if lane is not tl.driver:
            for a, b2 in _busy([*lane.bars, *lane.samples]):
                totals["busy"] += (b2 - a) / 1e9
    tl.buckets = dict(sorted(totals.items(), key=lambda kv: -kv[1]))
