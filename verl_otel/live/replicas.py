"""The rollout replicas in ``verl-otel top``: vLLM's own /metrics page of each rollout server (listed in the run's
file_sd with process role rollout_server and its replica): requests running and waiting, tokens generated, and STUCK for
a replica with requests running whose token count has not moved for the alert rule's window (VerlEngineNoTokens,
the same threshold). A page holds only totals, so :class:`ReplicaWatch` keeps across frames when each replica's
count last moved."""

from __future__ import annotations

from dataclasses import dataclass, replace

from verl_otel import semconv as sc
from verl_otel.dashboards.thresholds import DEFAULTS, duration_seconds
from verl_otel.live.sources import Series

#: replicas remembered across frames (a frame's replicas replace the last frame's, so this only caps a huge job)
MAX_REPLICAS = 1024
_FIELDS = {
    sc.VLLM_REQUESTS_RUNNING: "running",
    sc.VLLM_REQUESTS_WAITING: "waiting",
    sc.VLLM_GENERATION_TOKENS: "tokens",
}


@dataclass(frozen=True)
class Replica:
    instance: str
    replica: str
    running: float = 0.0
    waiting: float = 0.0
    tokens: float | None = None  # generated so far (vLLM's counter); None when the page has none
    quiet_s: float | None = None  # seconds since the token count last moved (None: not watched over frames)
    stuck: bool = False


def replicas_of(series: list[Series]) -> list[Replica]:
    """One row per rollout server (instance, replica), its engines summed, from a frame's series."""
    rows: dict[tuple[str, str], dict[str, float]] = {}
    for s in series:
        attr = _FIELDS.get(s.name)
        if attr is None or s.labels.get(sc.LABEL_PROCESS_ROLE) != sc.PROCESS_ROLE_ROLLOUT_SERVER:
            continue
        key = (s.labels.get("instance", ""), s.labels.get(sc.LABEL_REPLICA, ""))
        row = rows.setdefault(key, {})
        row[attr] = row.get(attr, 0.0) + s.value
    return [
        Replica(inst, rep, r.get("running", 0.0), r.get("waiting", 0.0), r.get("tokens"))
        for (inst, rep), r in sorted(rows.items(), key=lambda kv: (_num(kv[0][1]), kv[0][0]))
    ]


def _num(text: str) -> tuple[int, str]:
    return (int(text), "") if text.isdigit() else (1 << 30, text)


class ReplicaWatch:
    """When each replica's token count last moved, across frames; a replica with requests running and no new
    token for ``stuck_after_s`` is stuck."""

    def __init__(self, stuck_after_s: float | None = None) -> None:
        window = duration_seconds(DEFAULTS.engine_no_tokens_window)
        self.stuck_after_s = window if stuck_after_s is None else stuck_after_s
        self._moved: dict[tuple[str, str], tuple[float, float]] = {}  # (instance, replica) -> (tokens, since)

    def update(self, rows: list[Replica], now: float) -> list[Replica]:
        seen: dict[tuple[str, str], tuple[float, float]] = {}
        out = []
        for r in rows:
            key = (r.instance, r.replica)
            if r.tokens is None or len(seen) >= MAX_REPLICAS:
                out.append(r)
                continue
            last = self._moved.get(key)
            # an idle replica is quiet from now on: its next requests get the whole window
            since = last[1] if last is not None and last[0] == r.tokens and r.running > 0 else now
            seen[key] = (r.tokens, since)
            quiet = now - since
            out.append(replace(r, quiet_s=quiet, stuck=r.running > 0 and quiet >= self.stuck_after_s))
        self._moved = seen  # replicas gone from the frame are forgotten
        return out
