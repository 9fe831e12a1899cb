"""The training-progress dashboard's "Phase per process" row (issue 36): a Grafana state timeline, one row per
instrumented process, its colour the phase it is in. From the metrics each process already exports: the trainer's phase
(``verl_phase_active``), an agent-loop worker with samples in flight (rollout), a training worker inside an
update (mini-batches left); every process is "between phases" otherwise (its resident-memory gauge, which every
process exports, keeps its row). ``verl-otel timeline --step N`` draws one step of it from the trace, finer."""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.dashboards.grafana import Panel, Row, Target, m

_BY = f"{sc.LABEL_PROJECT}, {sc.LABEL_EXPERIMENT}, {sc.LABEL_PROCESS_ROLE}, instance"
IDLE_TEXT = "between phases"
#: a process' value -> (its phase, its colour); 0 is no phase
_PHASES = (*sc.PHASES, sc.PHASE_PARAM_SYNC)
_COLOURS: tuple[str, ...] = ("#4e79a7", "#f28e2b", "#59a14f", "#76b7b2", "#edc948", "#b07aa1")
_COLOURS += ("#e15759", "#9c755f", "#bab0ac", "#86bcb6", "#8cd17d", "#86bcb6")
PHASE_VALUES: tuple[tuple[int, str, str], ...] = (
    (0, IDLE_TEXT, "#d0d0d0"),
    *((i + 1, phase, colour) for i, (phase, colour) in enumerate(zip(_PHASES, _COLOURS, strict=True))),
)
_VALUE = {text: value for value, text, _ in PHASE_VALUES}


def _valued(selector: str, phase: str) -> str:
    """``selector``'s series where it holds, valued as ``phase``."""
    return f"({selector}) * 0 + {_VALUE[phase]}"


def phase_per_process() -> str:
    """One series per process (run, process role, instance), valued as the phase it is in now."""
    parts = []
    for p in _PHASES:
        only = f'{sc.LABEL_PHASE}="{p}"'
        parts.append(_valued(f"{m(sc.PHASE_ACTIVE.name, only)} == 1", p))
    parts.append(_valued(f"sum by ({_BY}) ({m(sc.ROLLOUT_SAMPLES_INFLIGHT.name)}) > 0", sc.PHASE_ROLLOUT))
    for role, phase in (("actor", sc.PHASE_UPDATE_ACTOR), ("critic", sc.PHASE_UPDATE_CRITIC)):
        only = f'{sc.LABEL_ROLE}="{role}"'
        left = f"{m(sc.UPDATE_MINIBATCHES_COMPLETED.name, only)} < {m(sc.UPDATE_MINIBATCHES_EXPECTED.name, only)}"
        parts.append(_valued(left, phase))
    # last: ``or`` keeps a right-hand series only where no left-hand one has its labels, and an agent-loop worker's
    # rollout series has exactly the baseline's labels (first, it would hide the phase)
    parts.append(f"max by ({_BY}) ({m(sc.PROCESS_RESIDENT_MEMORY.name)}) * 0")
    return f"max by ({_BY}) ({' or '.join(parts)})"


PHASE_PER_PROCESS = Panel(
    "Phase per process",
    "Each instrumented process' row coloured by what it is doing: the trainer by its running phase, an agent-loop "
    "worker while it has samples in flight (rollout), a training worker inside an actor or critic update; grey is "
    "between phases. Grey stretches in every row at once are the step's idle time (reward on the CPU, data "
    "loading); one row grey while others work is a process waiting (the long tail, a straggler). `verl-otel "
    "timeline --step N` draws one step of it, per rank and per sample, from the trace. Healthy: the colours move "
    "together from step to step.",
    "state-timeline",
    (Target(phase_per_process(), "{{verl_process_role}} {{instance}}"),),
    unit="none",
    mappings=tuple((str(v), text, colour) for v, text, colour in PHASE_VALUES),
)

#: the progress dashboard's row of the phase each process is in
ROWS = (Row(10, PHASE_PER_PROCESS),)
