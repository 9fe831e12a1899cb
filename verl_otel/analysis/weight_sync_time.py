"""Which part of a weight sync took its time: a training worker's ``weights.sync`` span says how long it gathered
the weights out of the model engine and how long the transfer (the checkpoint engine's bucket sends, or the
colocated rollout's load) took, with the bytes and buckets; a rollout replica's ``weights.receive`` span says how
long it waited on the sender's stream and how long its rollout engine took to load the weights."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from verl_otel import semconv as sc


def _num(value: Any) -> float:
    if isinstance(value, bool):
        return 0.0
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


@dataclass(frozen=True, slots=True)
class SyncParts:
    """One worker's side of a weight sync (its ``weights.sync`` span)."""

    seconds: float
    gather_s: float
    transfer_s: float
    nbytes: int
    tensors: int
    buckets: int
    mode: str | None = None

    @property
    def part(self) -> tuple[str, float]:
        """The part that took longer: the bucket transfer or the gather."""
        if self.gather_s > self.transfer_s:
            return "gather", self.gather_s
        return "bucket transfer", self.transfer_s

    def text(self) -> str:
        name, seconds = self.part
        other = f"gather {self.gather_s:.2f}s" if name != "gather" else f"transfer {self.transfer_s:.2f}s"
        mode = f", {self.mode}" if self.mode else ""
        return (
            f"weight sync: {name} took {seconds:.2f}s of {self.seconds:.2f}s ({other}; {self.buckets} "
            f"bucket{'s' * (self.buckets != 1)}, {_size(self.nbytes)} in {self.tensors} tensors{mode})"
        )

    def to_json(self) -> dict[str, Any]:
        return {**_json(self, gather_s=self.gather_s, transfer_s=self.transfer_s), "mode": self.mode}


def _json(side: SyncParts | ReceiveParts, **seconds: float) -> dict[str, Any]:
    """A side's JSON: the part that took longer, its own part seconds, then the sizes."""
    name, part_s = side.part
    return {
        "part": name,
        "part_s": round(part_s, 3),
        "duration_s": round(side.seconds, 3),
        **{key: round(value, 3) for key, value in seconds.items()},
        "bytes": side.nbytes,
        "tensors": side.tensors,
        "buckets": side.buckets,
    }


def from_span(attributes: Mapping[str, Any], seconds: float) -> SyncParts:
    mode = attributes.get(sc.ATTR_WSYNC_MODE)
    return SyncParts(
        seconds,
        _num(attributes.get(sc.ATTR_WSYNC_GATHER_S)),
        _num(attributes.get(sc.ATTR_WSYNC_TRANSFER_S)),
        int(_num(attributes.get(sc.ATTR_WSYNC_BYTES))),
        int(_num(attributes.get(sc.ATTR_WSYNC_TENSORS))),
        int(_num(attributes.get(sc.ATTR_WSYNC_BUCKETS))),
        None if mode is None else str(mode),
    )


@dataclass(frozen=True, slots=True)
class ReceiveParts:
    """One rollout replica's side of a weight sync (its ``weights.receive`` span)."""

    seconds: float
    receive_s: float  # pulling the checkpoint engine's stream: waiting for the sender's bytes
    load_s: float  # the rollout engine loading what the stream yielded
    nbytes: int
    tensors: int
    buckets: int

    @property
    def part(self) -> tuple[str, float]:
        """Where the replica's time went: waiting on the sender, or loading into its rollout engine."""
        if self.load_s > self.receive_s:
            return "loading into the rollout engine", self.load_s
        return "waiting on the sender", self.receive_s

    def text(self) -> str:
        name, seconds = self.part
        return (
            f"weight receive: {name} {seconds:.2f}s of {self.seconds:.2f}s (received {self.receive_s:.2f}s, "
            f"loaded {self.load_s:.2f}s; {self.buckets} bucket{'s' * (self.buckets != 1)}, {_size(self.nbytes)} "
            f"in {self.tensors} tensors)"
        )

    def to_json(self) -> dict[str, Any]:
        return _json(self, receive_s=self.receive_s, load_s=self.load_s)


def receive_from_span(attributes: Mapping[str, Any], seconds: float) -> ReceiveParts:
    return ReceiveParts(
        seconds,
        _num(attributes.get(sc.ATTR_WSYNC_RECEIVE_S)),
        _num(attributes.get(sc.ATTR_WSYNC_LOAD_S)),
        int(_num(attributes.get(sc.ATTR_WSYNC_BYTES))),
        int(_num(attributes.get(sc.ATTR_WSYNC_TENSORS))),
        int(_num(attributes.get(sc.ATTR_WSYNC_BUCKETS))),
    )


Side = TypeVar("Side", SyncParts, ReceiveParts)


def slowest(sides: list[Side]) -> Side | None:
    """The side the phase waited for: the longest (each actor rank syncs, LoRA twice; each replica receives)."""
    return max(sides, key=lambda s: s.seconds, default=None)


#: what the streaming reader keeps of a ``weights.sync`` or ``weights.receive`` span
ATTRS: tuple[str, ...] = (
    sc.ATTR_WSYNC_MODE,
    sc.ATTR_WSYNC_GATHER_S,
    sc.ATTR_WSYNC_TRANSFER_S,
    sc.ATTR_WSYNC_RECEIVE_S,
    sc.ATTR_WSYNC_LOAD_S,
    sc.ATTR_WSYNC_BYTES,
    sc.ATTR_WSYNC_TENSORS,
    sc.ATTR_WSYNC_BUCKETS,
)
