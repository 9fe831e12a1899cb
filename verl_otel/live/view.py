"""``verl-otel top``'s frame as rich renderables: run progress and ETA, the phases running now, one bar
per agent-loop worker and their total, actor/critic update progress, the last steps' phase times and
the health signals."""

from __future__ import annotations

import time

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from verl_otel import semconv as sc
from verl_otel.live.health_table import Signal
from verl_otel.live.run_view import STEP_KEY, History, RolloutWorkerProgress, RunView, step_row
from verl_otel.telemetry.eta import bar

BAR_WIDTH = 24
#: worker rows shown per mode; the least complete first when there are more (the ones to watch)
MAX_WORKERS = 16
PHASE_COLUMNS = 8
_MARK = {"ok": ("ok", "green"), "tripped": ("TRIPPED", "bold red"), "no data": ("-", "dim")}


def dur(seconds: float | None) -> str:
    """12.3s, 4m05s, 2h03m: short and monotone in width as the numbers grow."""
    if seconds is None or seconds != seconds:
        return "-"
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _bar(done: float, total: float) -> Text:
    """The [VERL_PROGRESS] ``[######------]`` (readable without colour: logs, ``--once`` in scripts), coloured."""
    text = bar(int(done), int(total), BAR_WIDTH)
    filled = text.count("#")
    return Text.assemble("[", ("#" * filled, "green"), ("-" * (BAR_WIDTH - filled), "dim"), "]")


def _pct(done: float, total: float) -> str:
    return f"{100 * done / total:.0f}%" if total > 0 else "-"


def header(view: RunView, now: float) -> RenderableType:
    where = f"{view.targets} target{'s' * (view.targets != 1)}" + (
        f", {len(view.failed)} unreachable" if view.failed else ""
    )
    title = Text.assemble(
        ("verl-otel top", "bold"),
        "  ",
        (view.run or "(run not labelled)", "cyan"),
        f"  {time.strftime('%H:%M:%S', time.localtime(now))}  {view.source} ({where})",
    )
    lines: list[RenderableType] = [title]
    if view.multi_host:
        lines.append(Text("hosts: " + ", ".join(f"{h} ({n})" for h, n in view.hosts.items()), "cyan"))
    if view.other_runs:
        lines.append(Text(f"other runs in this source: {', '.join(view.other_runs)} (--run to pick one)", "dim"))
    step, planned = view.step, view.planned
    row = Table.grid(padding=(0, 1))
    if view.targets == 0 and view.source.endswith(".json"):
        # each process takes its /metrics out of the file at exit: an empty list is a run that has ended
        row.add_row(Text("no process of the run is listed: it has ended, or not started yet", "yellow"))
    elif view.targets and len(view.failed) >= view.targets:
        row.add_row(Text("no process of the run answers: it has ended, or this host cannot reach its nodes", "yellow"))
    elif step is None:
        row.add_row(Text("no trainer metrics yet (the trainer exports verl_training_step once fit() starts)", "dim"))
    else:
        ago = f"last step ended {dur(now - view.last_step_ts)} ago" if view.last_step_ts else ""
        done = step - 1 if view.active and step >= 1 else step  # the step running now is not done
        if planned:
            row.add_row(
                Text(f"step {_n(step)}/{_n(planned)}", "bold"),
                _bar(done, planned),
                _pct(done, planned),
                f"ETA {dur(view.eta_s)}",
                ago,
            )
        else:
            row.add_row(Text(f"step {_n(step)}", "bold"), f"ETA {dur(view.eta_s)}", ago)
    lines.append(row)
    if view.active:
        now_running = ", ".join(
            f"{p} {dur(e)}" + (f" (mean {dur(view.phase_mean_s[p])})" if p in view.phase_mean_s else "")
            for p, e in sorted(view.active.items())
        )
        lines.append(Text.assemble(("running: ", "bold"), (now_running, "yellow")))
    else:
        lines.append(Text("running: no phase", "dim"))
    split = gpu_split_text(view)
    if split:
        # goodput before the buckets: a narrow terminal cuts the line's end, the smallest shares
        ratio = f" (goodput {view.goodput:.0%})" if view.goodput is not None else ""
        lines.append(Text.assemble((f"GPU time, last step{ratio}: ", "bold"), split))
    if view.stalls:
        stuck = "; ".join(
            f"{proc}{_on(view.stall_hosts.get((proc, phase), []), view)} in {phase}" + (f" at {where}" if where else "")
            for (proc, phase), where in sorted(view.stalls.items())
        )
        lines.append(Text.assemble(("STALLED: ", "bold red"), (stuck, "red"), ("  (verl-otel doctor)", "dim")))
    hung = [r for r in view.replicas if r.stuck]
    if hung:
        what = "; ".join(f"replica {r.replica} ({_n(r.running)} running, no token for {dur(r.quiet_s)})" for r in hung)
        lines.append(Text.assemble(("STUCK rollout: ", "bold red"), (what, "red")))
    return Group(*lines)


def gpu_split_text(view: RunView) -> str:
    """The last finished step's GPU time by bucket, largest first (``generating 52%, long_tail 30%, ...``)."""
    total = sum(view.gpu_split.values())
    if total <= 0:
        return ""
    parts = [
        f"{b} {v / total:.0%}" for b, v in sorted(view.gpu_split.items(), key=lambda kv: -kv[1]) if v / total >= 0.005
    ]
    return ", ".join(parts)


def _on(hosts: list[str], view: RunView) -> str:
    """`` on hostB`` where the run spans hosts (nothing on one host)."""
    return f" on {','.join(hosts)}" if hosts and view.multi_host else ""


def _shown(rows: list[RolloutWorkerProgress], limit: int) -> list[RolloutWorkerProgress]:
    if len(rows) <= limit:
        return rows
    return sorted(rows, key=lambda w: (w.completed / w.expected if w.expected else 1.0, -w.oldest_inflight_s))[:limit]


def rollout_table(view: RunView, limit: int = MAX_WORKERS) -> RenderableType | None:
    if not view.rollout_workers:
        return None
    table = Table(title="rollout (agent-loop workers)", title_justify="left", box=None, padding=(0, 1))
    for col in ("worker", "mode", "progress", "done", "%", "in flight", "oldest", "elapsed", "ETA"):
        table.add_column(col, justify="left" if col in ("worker", "mode", "progress") else "right")
    for mode in view.modes():
        rows = [w for w in view.rollout_workers if w.mode == mode]
        for w in _shown(rows, limit):
            table.add_row(
                f"{w.host}/{w.rollout_worker}" if view.multi_host and w.host else w.rollout_worker,
                mode,
                _bar(w.completed, w.expected),
                f"{_n(w.completed)}/{_n(w.expected)}",
                _pct(w.completed, w.expected),
                _n(w.inflight),
                dur(w.oldest_inflight_s) if w.inflight else "-",
                dur(w.elapsed_s),
                dur(w.eta_s) if w.running else "-",
            )
        if len(rows) > limit:
            table.add_row(Text(f"... {len(rows) - limit} more", "dim"), mode)
        done, expected = view.totals(mode)
        etas = [w.eta_s for w in rows if w.running and w.eta_s is not None]
        table.add_row(
            Text("total", "bold"),
            mode,
            _bar(done, expected),
            f"{_n(done)}/{_n(expected)}",
            _pct(done, expected),
            _n(sum(w.inflight for w in rows)),
            "",
            "",
            dur(max(etas)) if etas else "-",
            style="bold",
        )
    return table


def replica_table(view: RunView) -> RenderableType | None:
    """The rollout servers (vLLM's pages): requests, tokens, and STUCK beside a replica with requests running
    and no new token for the alert rule's window."""
    if not view.replicas:
        return None
    table = Table(title="rollout replicas (vLLM)", title_justify="left", box=None, padding=(0, 1))
    for col in ("replica", "health", "running", "waiting", "tokens", "no token for", "instance"):
        table.add_column(col, justify="left" if col in ("replica", "health", "instance") else "right")
    for r in view.replicas:
        health = (
            Text("STUCK", "bold red")
            if r.stuck
            else Text("ok" if r.running else "idle", "green" if r.running else "dim")
        )
        quiet = dur(r.quiet_s) if r.running and r.quiet_s else "-"
        tokens = "-" if r.tokens is None else _n(r.tokens)
        table.add_row(r.replica or "?", health, _n(r.running), _n(r.waiting), tokens, quiet, r.instance)
    return table


def tool_table(view: RunView) -> RenderableType | None:
    """Agent loops' tools: calls in flight now, calls so far and the share that failed (a tool gone down)."""
    if not view.tools:
        return None
    table = Table(title="tools (agent loops)", title_justify="left", box=None, padding=(0, 1))
    for col in ("tool", "in flight", "calls", "failed"):
        table.add_column(col, justify="left" if col == "tool" else "right")
    for tool, row in sorted(view.tools.items(), key=lambda kv: -kv[1].calls):
        share = row.failed / row.calls if row.calls else 0.0
        failed = Text(f"{share:.0%}", "bold red" if share >= 0.5 else ("yellow" if share > 0 else "green"))
        table.add_row(tool, _n(row.inflight), _n(row.calls), failed)
    return table


def update_table(view: RunView) -> RenderableType | None:
    if not view.updates:
        return None
    table = Table(
        title="update (optimizer mini-batches, all PPO epochs)", title_justify="left", box=None, padding=(0, 1)
    )
    for col in ("role", "progress", "done", "%", "epoch", "ETA"):
        table.add_column(col, justify="left" if col in ("role", "progress") else "right")
    for u in view.updates:
        table.add_row(
            u.role,
            _bar(u.completed, u.expected),
            f"{_n(u.completed)}/{_n(u.expected)}",
            _pct(u.completed, u.expected),
            "-" if u.epoch is None else _n(u.epoch),
            dur(u.eta_s) if u.completed < u.expected else "-",
        )
    return table


def steps_table(history: History, view: RunView, last: int) -> RenderableType | None:
    rows = history.phase_rows(last)
    if not rows and view.step_phases():  # nothing seen across frames yet: the last logged step
        step = view.metrics.get(STEP_KEY)
        rows = [(int(step) if step is not None else -1, step_row(view.metrics))]
    if not rows:
        return None
    totals: dict[str, float] = {}
    for _step, phases in rows:
        for p, s in phases.items():
            if p != sc.SPAN_STEP:
                totals[p] = totals.get(p, 0.0) + s
    columns = sorted(totals, key=lambda p: -totals[p])[:PHASE_COLUMNS]
    table = Table(title="last steps (seconds per phase)", title_justify="left", box=None, padding=(0, 1))
    table.add_column("step")
    table.add_column("step (verl)", justify="right")  # verl's timing_s/step
    for p in columns:
        table.add_column(p, justify="right")
    for step, row in rows:
        table.add_row("?" if step < 0 else str(step), _s(row.get(sc.SPAN_STEP)), *(_s(row.get(p)) for p in columns))
    return table


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def health_table(signals: list[Signal]) -> RenderableType:
    table = Table(
        title="health (the guides' signals, alert-rule thresholds)", title_justify="left", box=None, padding=(0, 1)
    )
    table.add_column("verdict")
    table.add_column("signal")
    table.add_column("now")
    for s in sorted(signals, key=lambda s: (not s.tripped, s.verdict == "no data")):
        mark, style = _MARK[s.verdict]
        table.add_row(Text(mark, style), Text(s.name, "bold" if s.tripped else ""), s.detail)
    return table


def frame(
    view: RunView,
    history: History,
    signals: list[Signal],
    now: float | None = None,
    steps_shown: int = 5,
    workers_shown: int = MAX_WORKERS,
) -> RenderableType:
    now = time.time() if now is None else now
    parts = [
        header(view, now),
        *map(
            _spaced,
            (
                rollout_table(view, workers_shown),
                replica_table(view),
                tool_table(view),
                update_table(view),
                steps_table(history, view, steps_shown),
                health_table(signals),
            ),
        ),
    ]
    if view.failed:
        parts.append(
            Text("unreachable: " + "; ".join(view.failed[:4]) + (" ..." if len(view.failed) > 4 else ""), "dim")
        )
    if view.dropped:
        parts.append(Text(f"telemetry dropped {_n(view.dropped)} items (verl_otel_dropped_total)", "dim"))
    return Group(*(p for p in parts if p is not None))


def _spaced(part: RenderableType | None) -> RenderableType | None:
    return None if part is None else Group(Text(""), part)
