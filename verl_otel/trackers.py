"""The trackers of one process, owned by its runtime: the step tracer, the rollout/update trackers and their observers,
each built with the process' :class:`~verl_otel.telemetry.services.Services` (tracer, metric store, settings,
flush requests) through its constructor.

Hooks reach it through :func:`current` where verl's code enters ours; a forked child gets a new runtime and
so new trackers, and ``runtime.reset_for_tests()`` closes the old ones (their threads, their exit hook). What a
process builds follows from its process role, in one table, :data:`PROCESS_ROLES`: a hook says what the
process is with :meth:`Trackers.wire`, once, and that row wires the process' objects together (readings into the
metric store, observers onto the trackers, the [VERL_PROGRESS] lines of verl_otel/progress/).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from verl_otel import config, runtime
from verl_otel import semconv as sc
from verl_otel.progress.bars import RolloutBar, UpdateBar
from verl_otel.progress.process import Progress
from verl_otel.progress.stall_line import print_stall
from verl_otel.progress.step_line import Note, StepConsole, WindowConsole
from verl_otel.telemetry.agent import AgentTools
from verl_otel.telemetry.async_trainer import SubmitLinks, TrainerSide
from verl_otel.telemetry.next_profile import NextProfile
from verl_otel.telemetry.reward_emit import RewardEmit
from verl_otel.telemetry.reward_spans import RewardSpans
from verl_otel.telemetry.rollout import RolloutTracker
from verl_otel.telemetry.rollout_spans import BatchSpans, Describe
from verl_otel.telemetry.rollouter import RolloutWindows
from verl_otel.telemetry.services import Services
from verl_otel.telemetry.steps import StepTracer
from verl_otel.telemetry.trainer_metrics import TrainerMetrics
from verl_otel.telemetry.update import UpdateTracker

T = TypeVar("T")

#: the key a fully_async trainer process is wired under (its process role is the trainer's, its parts its own)
FULLY_ASYNC_TRAINER = "fully_async_trainer"


def services_of(rt: runtime.Runtime) -> Services:
    """What the runtime lends the trackers: nothing of it but these calls."""
    return Services(
        settings=rt.settings,
        store=rt.store,
        tracer=lambda: rt.tracer,
        flush_soon=rt.flush_soon,
        flush_wait=rt.flush_wait,
        stalls=lambda: rt.stalls,
        every_tick=rt.every_tick,
        preset_span_id=runtime.preset_span_id,
        declare=rt.declare,
        budget_left_s=rt.budget.left_s,
        spend=rt.budget.spend,
    )


class Trackers:
    """The process' trackers; each is made on first use (a timer hook asks every process whether a fit()
    runs here), and wired to its observers by its process role's row of :data:`PROCESS_ROLES`."""

    def __init__(self, rt: runtime.Runtime) -> None:
        self.runtime = rt
        self.pid = rt.pid
        self.services = services_of(rt)
        self._lock = threading.Lock()
        self.step_notes: list[Note] = []  # appended to the step line (fully_async's parameter version)
        self.worker_calls: dict[str, int] = {}  # a training worker's updates per role: the step a batch lacks
        self._exit_hooks: list[Callable[[], object]] = []
        self._parts: dict[str, Any] = {}
        if rt.settings.step_line or rt.settings.console_only:
            rt.stall_listeners.append(print_stall)  # the stall's console line, in every process role

    def _part(self, name: str, make: Callable[[], T]) -> T:
        """The object ``name``, made once (under the lock: two first calls on two threads get the same one)."""
        part = self._parts.get(name)
        if part is None:
            with self._lock:
                part = self._parts.get(name)
                if part is None:
                    part = self._parts[name] = make()
        return part

    # -- the objects ---------------------------------------------------------------------------------------
    @property
    def steps(self) -> StepTracer:
        """The fit() process' step tracer (inactive elsewhere)."""
        return self._part("steps", lambda: StepTracer(self.services))

    @property
    def rollout(self) -> RolloutTracker:
        """An agent-loop worker's rollout progress."""
        return self._part("rollout", RolloutTracker)

    @property
    def agent_tools(self) -> AgentTools:
        """An agent-loop worker's tool figures (verl's tool agent loop): calls in flight, their metrics."""
        return self._part("agent_tools", lambda: AgentTools(self.services))

    @property
    def update(self) -> UpdateTracker:
        """A training worker's actor/critic update progress."""
        return self._part("update", UpdateTracker)

    @property
    def windows(self) -> RolloutWindows:
        """fully_async's rollouter: its parameter-version windows (inactive elsewhere)."""
        return self._part("windows", lambda: RolloutWindows(self.services))

    @property
    def trainer_side(self) -> TrainerSide:
        """fully_async's trainer: staleness, idle ratio, links to the rollouter's windows."""
        return self._part("trainer_side", TrainerSide)

    @property
    def submits(self) -> SubmitLinks:
        """v1's async trainers: a step's links to the steps that submitted its prompts."""
        return self._part("submits", SubmitLinks)

    @property
    def reward_emit(self) -> RewardEmit:
        """The fit() process' step-end emit of the reward-loop workers' spans."""
        return self._part("reward_emit", lambda: RewardEmit(self.services))

    @property
    def reward_spans(self) -> RewardSpans:
        """A reward-loop worker's spans (the K slowest calls per trainer span)."""
        return self._part("reward_spans", lambda: RewardSpans(self.services, self.services.settings.sample_spans))

    @property
    def next_profile(self) -> NextProfile:
        """The fit() process' next-step profiles (VERL_OTEL_CAPTURE_NEXT=1): a stall arms verl's profiler."""
        return self._part(
            "next_profile", lambda: NextProfile(self.services.settings.capture, self.steps.innermost_span)
        )

    @property
    def progress(self) -> Progress:
        """The [VERL_PROGRESS] lines of this process (their settings read once)."""
        return self._part("progress", lambda: Progress(config.load_progress()))

    def validation_span(self) -> Any:
        """The open validation span: the trainer's ``validate`` phase, or fully_async's rollouter.validate."""
        return self.steps.innermost_span(sc.PHASE_VALIDATE) or self.windows.validating

    # -- process roles ---------------------------------------------------------------------------------------
    def wire(
        self,
        process_role: str,
        *,
        key: str | None = None,
        index: int | None = None,
        project: Any = None,
        experiment: Any = None,
        **parts: Any,
    ) -> None:
        """This process is a ``process_role``: the runtime declares it, and the row of ``key`` (default:
        ``process_role``) in :data:`PROCESS_ROLES` wires its objects, once; ``parts`` are what the hooks lend that
        row (verl's readers). Never raises."""
        key = key or process_role
        row = PROCESS_ROLES.get(key)
        self.runtime.wire(
            process_role,
            index=index,
            project=project,
            experiment=experiment,
            setup=None if row is None else (lambda _rt: row(self, **parts)),
            key=key,
        )

    def wired(self, key: str) -> bool:
        return self.runtime.wired(key)

    def at_exit(self, hook: Callable[[], object]) -> None:
        """Run ``hook`` where the process gets to exit (once; closed trackers' hooks never run)."""
        with self._lock:
            if not self._exit_hooks:
                atexit.register(self._exit)
            self._exit_hooks.append(hook)

    def _exit(self) -> None:
        if self.pid != os.getpid():  # a forked child inherits the handler, not the parent's trackers
            return
        for hook in list(self._exit_hooks):
            with contextlib.suppress(Exception):  # an exit hook never raises at interpreter exit
                hook()

    def close(self) -> None:
        """These trackers are done (a test's reset): its threads stop and its exit hooks are taken back."""
        with self._lock:
            if self._exit_hooks:
                atexit.unregister(self._exit)
            self._exit_hooks.clear()
        progress = self._parts.get("progress")
        if progress is not None:
            progress.stop()


# -- the process role table: what each process role wires -------------------------------------------------------
def _trainer(m: Trackers) -> None:
    """The process where fit() runs: the metrics, the reward emit, the step line and the [VERL_PROGRESS] console."""
    observers = m.steps.observers
    observers.append(TrainerMetrics(m.services.store))
    observers.append(m.reward_emit)  # the reward workers' spans at each step's end
    if m.services.settings.step_line:
        observers.append(StepConsole(m.step_notes))
    console = m.progress.trainer_console()
    if console is not None:
        observers.append(console)
    m.runtime.ends.watch(m.steps.abort)  # a signal ends the open step at once (main thread only: fit()'s)
    if m.services.settings.capture.next_step:  # a stall arms verl's profiler for the next step (hooks attach it)
        observers.append(m.next_profile)
        m.runtime.stall_arms.append(m.next_profile.arm)


def _fully_async_trainer(m: Trackers) -> None:
    """fully_async's trainer process: its gauges, and its parameter version on the step line."""
    m.services.store.add_source(m.trainer_side.readings)
    m.step_notes.append(m.trainer_side.console_note)


def _train_worker(m: Trackers) -> None:
    """A training worker: update-progress gauges and the [VERL_PROGRESS] actor/critic bar."""
    m.services.store.add_source(m.update.readings)
    if m.progress.enabled:
        m.update.on_progress.append(UpdateBar(m.progress.settings))


def _agent_loop(m: Trackers, describe: Describe | None = None) -> None:
    """An agent-loop worker: gauges, the batch's spans (the slowest samples), the [VERL_PROGRESS] bar.
    ``describe`` reads a sample's span attributes out of verl's objects (the hooks lend it)."""
    tracker, settings = m.rollout, m.services.settings
    m.services.store.add_source(tracker.readings)
    tools = m.agent_tools
    tools.worker = "" if tracker.worker is None else str(tracker.worker)
    m.services.store.add_source(tools.readings)
    spans = BatchSpans(m.services, settings.sample_spans)
    if describe is not None:
        spans.describe = describe
    tracker.keep = settings.sample_spans  # only the slowest are held until the batch is done
    tracker.on_batch_done.append(spans.done)
    tracker.on_dispatch.append(spans.adopt)
    m.services.every_tick(spans.expire)
    progress = m.progress
    mine = progress.settings.rollout_worker_index in (-1, tracker.worker if tracker.worker is not None else 0)
    if progress.enabled and mine:
        tracker.on_progress.append(RolloutBar(progress.settings))


def _reward_worker(m: Trackers) -> None:
    """A reward-loop worker: its spans, and the last groups where the process gets to exit."""
    spans = m.reward_spans
    m.at_exit(lambda: spans.emit(False))


def _rollouter(m: Trackers) -> None:
    """fully_async's rollouter process: its gauges, and its console line per window."""
    m.services.store.add_source(m.windows.readings)
    if m.services.settings.step_line:
        m.windows.on_window_closed.append(WindowConsole())


#: process role (or wiring key) -> what it wires; a process role without a row (the rollout server: vLLM's own
#: spans and page, see hooks/engine.py) is declared only
PROCESS_ROLES: dict[str, Callable[..., None]] = {
    sc.PROCESS_ROLE_TRAINER: _trainer,
    FULLY_ASYNC_TRAINER: _fully_async_trainer,
    sc.PROCESS_ROLE_WORKER: _train_worker,
    sc.PROCESS_ROLE_AGENT_LOOP: _agent_loop,
    sc.PROCESS_ROLE_REWARD: _reward_worker,
    sc.PROCESS_ROLE_ROLLOUTER: _rollouter,
}


def current() -> Trackers:
    """This process' trackers (its runtime's; made on first use, anew in a forked child). Never raises."""
    rt = runtime.current()
    trackers = rt.trackers
    if trackers is None:
        trackers = rt.own_trackers(Trackers)
    return trackers
