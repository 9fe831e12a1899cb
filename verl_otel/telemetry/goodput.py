"""Goodput: a step's GPU time split into what the GPUs were doing (semconv/goodput.py), from what the trainer
process recorded itself: its phases' intervals (the step tracer) and the rollout's occupancy (the agent-loop
workers' samples in flight, asked for through :class:`Occupancy`). Not from the exported spans, which are capped.

Each pool's GPU time is its GPUs x the step's wall time. Every instant of the step falls in the innermost phase open
then (or none: idle), and that phase names the pool's bucket; the rollout phase's time is then split into
generating (the replicas' occupancy) and the long tail (the rest). So the buckets add up to the whole by
construction, whatever the phases' nesting or overlap.

Where GPUs exist, the buckets of the phases that use them (semconv ``BUSY_BUCKETS``) also carry the measured busy
share of the GPUs that did the work (NVML, read in those processes: export/gpu_sampler.py), asked for when each
phase ends and joined, without waiting, when the step ends (:class:`GpuBusy`); absent where not measured.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from verl_otel import semconv as sc


@dataclass(frozen=True)
class Pool:
    """A resource pool: its name (semconv ``POOL_*``), GPUs, and whether it generates and trains."""

    name: str
    gpus: int
    rollout: bool
    train: bool


def pools_of(train_gpus: int | None, rollout_gpus: int | None, trainer_only: bool = False) -> list[Pool]:
    """The pools a trainer process accounts: the colocated one (training and rollout on the same GPUs), beside a
    standalone rollout pool when there is one; fully_async's trainer (``trainer_only``) accounts its training
    pool only (its rollout pool is the rollouter's). A count that is unknown or below 1 is 1."""
    train = max(1, train_gpus or 1)
    if trainer_only:
        return [Pool(sc.POOL_TRAIN, train, rollout=False, train=True)]
    pools = [Pool(sc.POOL_COLOCATED, train, rollout=True, train=True)]
    if rollout_gpus:
        pools.append(Pool(sc.POOL_ROLLOUT, max(1, rollout_gpus), rollout=True, train=False))
    return pools


@dataclass
class Split:
    """One step's GPU-seconds per pool and bucket (every bucket of every pool: zeros included)."""

    wall_s: float
    pools: dict[str, dict[str, float]] = field(default_factory=dict)
    gpus: int = 0
    measured: bool = False  # the rollout's occupancy came from the workers (else the rollout counts as generating)
    busy: dict[str, float] = field(default_factory=dict)  # bucket -> measured busy share (0-1), where measured

    @property
    def gpu_seconds(self) -> float:
        return sum(sum(b.values()) for b in self.pools.values())

    def totals(self) -> dict[str, float]:
        """Bucket -> GPU-seconds over every pool."""
        out = dict.fromkeys(sc.BUCKETS, 0.0)
        for buckets in self.pools.values():
            for name, value in buckets.items():
                out[name] += value
        return out

    @property
    def ratio(self) -> float:
        total = self.gpu_seconds
        good = sum(v for k, v in self.totals().items() if k in sc.GOOD_BUCKETS)
        return good / total if total > 0 else 0.0

    def attributes(self) -> dict[str, Any]:
        """The step span's attributes (semconv: ``verl.step.gpu_seconds``, ``verl.goodput.<bucket>``)."""
        attrs: dict[str, Any] = {sc.bucket_attr(k): round(v, 6) for k, v in self.totals().items()}
        attrs[sc.ATTR_STEP_GPU_SECONDS] = round(self.gpu_seconds, 6)
        attrs[sc.ATTR_GOODPUT_RATIO] = round(self.ratio, 6)
        attrs[sc.ATTR_GOODPUT_GPUS] = self.gpus
        attrs[sc.ATTR_GOODPUT_TAIL_MEASURED] = self.measured
        attrs.update({sc.busy_attr(k): round(v, 4) for k, v in self.busy.items()})
        return attrs


def _bucket(pool: Pool, phase: str | None) -> str:
    """The bucket of an instant in ``phase`` (the innermost open; None: between phases) on ``pool``."""
    bucket = sc.PHASE_BUCKETS.get(phase or "")
    if bucket is None:
        return sc.BUCKET_IDLE
    if bucket == sc.BUCKET_GENERATING:
        return bucket if pool.rollout else sc.BUCKET_WAITING_FOR_SAMPLES
    if bucket in sc.GOOD_BUCKETS and not pool.train:
        return sc.BUCKET_IDLE  # a standalone rollout pool while the trainer trains
    return bucket


def _innermost(start: float, end: float, phases: Sequence[tuple[str, float, float]]) -> str | None:
    """The phase open over all of [start, end] that started last (the innermost of nested ones)."""
    best: tuple[float, float] | None = None
    name = None
    for phase, ps, pe in phases:
        if ps <= start and pe >= end and (best is None or (ps, -pe) > best):
            best, name = (ps, -pe), phase
    return name


def account(
    start: float,
    end: float,
    phases: Iterable[tuple[str, float, float]],
    pools: Sequence[Pool],
    rollout_busy_s: float | None = None,
) -> Split:
    """Split [start, end] (seconds, one clock) over ``pools``. ``phases``: (phase, start, end) of the trainer's
    phases in the step, possibly nested or overlapping; ``rollout_busy_s``: the rollout replicas' occupancy in the
    step as replica-seconds of full occupancy per replica (0 .. the wall time; None: not measured, the rollout
    phase is all generating). A standalone rollout pool busy outside the rollout phase (async modes) is
    generating there too, taken from its idle time."""
    wall = max(0.0, end - start)
    clipped = [(p, max(start, s), min(end, e)) for p, s, e in phases if e > start and s < end and e > s]
    edges = sorted({start, end, *(s for _, s, _ in clipped), *(e for _, _, e in clipped)})
    spans = [(a, b, _innermost(a, b, clipped)) for a, b in itertools.pairwise(edges) if b > a]
    split = Split(wall, gpus=sum(p.gpus for p in pools), measured=rollout_busy_s is not None)
    for pool in pools:
        secs = dict.fromkeys(sc.BUCKETS, 0.0)
        for a, b, phase in spans:
            secs[_bucket(pool, phase)] += b - a
        if pool.rollout and rollout_busy_s is not None:
            busy = min(max(0.0, rollout_busy_s), wall)
            rolling = secs[sc.BUCKET_GENERATING]
            secs[sc.BUCKET_GENERATING] = min(rolling, busy)
            secs[sc.BUCKET_LONG_TAIL] = rolling - secs[sc.BUCKET_GENERATING]
            if not pool.train:  # standalone: generating outside the rollout phase (the next step's, async)
                extra = min(busy - secs[sc.BUCKET_GENERATING], secs[sc.BUCKET_IDLE])
                if extra > 0:
                    secs[sc.BUCKET_IDLE] -= extra
                    secs[sc.BUCKET_GENERATING] += extra
        split.pools[pool.name] = {k: v * pool.gpus for k, v in secs.items()}
    return split


def occupancy_seconds(records: Iterable[tuple[float, int]], workers: int) -> float | None:
    """The rollout's replica-seconds of full occupancy from each agent-loop worker's (samples x seconds in
    flight, peak samples in flight): each worker's area over its peak, averaged over ``workers`` (they share the
    replicas evenly; one that got no sample counts 0). None without a record."""
    rows = list(records)
    if not rows or workers <= 0:
        return None
    return sum(area / peak for area, peak in rows if peak > 0) / max(workers, len(rows))


class Occupancy(Protocol):
    """The trainer's way to the agent-loop workers' occupancy (hooks/rollout.py asks them through Ray): asked
    when the rollout phase ends, read without waiting when the step ends."""

    def ask(self, step: int) -> None: ...

    def seconds(self, step: int) -> float | None: ...


class GpuBusy(Protocol):
    """The trainer's way to its GPU processes' measured busy share (hooks/goodput.py asks them through Ray): asked
    when each phase ends, read without waiting when the step ends: phase -> busy share (0-1), None: none in."""

    def shares(self, step: int) -> Mapping[str, float] | None: ...


def busy_of(split: Split, phases: Mapping[str, float] | None) -> dict[str, float]:
    """The buckets' measured busy share from the phases' (the rollout's goes to generating and long_tail both):
    only buckets of semconv ``BUSY_BUCKETS`` that hold GPU time in ``split``, a share clamped to 0-1."""
    if not phases:
        return {}
    totals, out = split.totals(), {}
    for phase, share in phases.items():
        bucket = sc.PHASE_BUCKETS.get(phase)
        if bucket is None:
            continue
        for name in (bucket, sc.BUCKET_LONG_TAIL) if bucket == sc.BUCKET_GENERATING else (bucket,):
            if name in sc.BUSY_BUCKETS and totals.get(name, 0.0) > 0:
                out[name] = min(1.0, max(0.0, float(share)))
    return out


def step_split(
    pools: Sequence[Pool],
    span: tuple[float, float],
    phases: Iterable[tuple[str, float, float]],
    step: int,
    occupancy: Occupancy | None,
    gpu_busy: GpuBusy | None,
) -> Split | None:
    """:func:`account` of the step ``span`` (start, end) for the step tracer, with the rollout's ``occupancy`` and
    the GPUs' measured busy shares (``gpu_busy``) of ``step`` read without waiting and joined into its buckets;
    None (and the step goes without) if it fails: never raises."""
    try:
        busy = occupancy.seconds(step) if occupancy is not None else None
        split = account(span[0], span[1], phases, pools, busy)
        split.busy = busy_of(split, gpu_busy.shares(step) if gpu_busy is not None else None)
        return split
    except Exception:  # noqa: BLE001 - telemetry never raises into training
        return None
