"""One telemetry runtime per process: settings, the tracer (ours or the caller's), the metric store, the exporters and
the one flusher thread. :func:`current` never raises: the runtime is made on first use (again in a forked child), its
SDK parts lazily, each behind a boundary that degrades (a no-op tracer, no exporter) with one log line instead of
raising into verl. It owns the process' trackers (verl_otel/trackers.py, which the hooks reach). A process says
what it is with :meth:`Runtime.wire` (its process role, run and set-up, once per process role); training threads
only *ask* for a flush (:meth:`Runtime.flush_soon`); fit end waits ``VERL_OTEL_SHUTDOWN_TIMEOUT`` s at most.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

from opentelemetry import trace

from verl_otel import config as cfg
from verl_otel import semconv as sc
from verl_otel._log import logger, warn_once
from verl_otel.process.metrics import MetricStore
from verl_otel.process.stalls import Stall, StallWatch

_given: dict[str, Any] = {}  # providers handed to instrument() in this process
_on_process_role: list[Callable[[str], None]] = []  # told each process role once, when it is wired (on_process_role)


def on_process_role(tell: Callable[[str], None]) -> None:
    """Call ``tell(process_role)`` once per process role, when first wired (hooks/targets.py: the start-up line)."""
    if tell not in _on_process_role:
        _on_process_role.append(tell)


class Runtime:
    def __init__(self, settings: cfg.Settings) -> None:
        self.pid = os.getpid()
        self.settings = settings
        self.store = MetricStore(settings.max_metric_keys, settings.deprecated_names)
        self.destination = "none"
        self._lock = threading.RLock()
        self._process_role: tuple[str, int | None] = (settings.process_role, None)
        self._run: dict[str, str] = {}
        self._provider: Any = None
        self._tracer: trace.Tracer | None = None
        self._meter_provider: Any = None
        self._metrics_started = False
        self._wired: set[str] = set()
        self._reported: set[str] = set()  # process roles whose hook coverage line was logged
        self._engine_provider: Any = None  # an inference engine's request spans (vLLM), see engine_provider
        self._cluster: Any = None  # the Ray driver's discovery of every node's targets (see discover)
        self._stalls: Any = None  # the stall watch (process/stalls.py), made on first use
        self.stall_listeners: list[Callable[[Stall], None]] = []  # told each new stall (the trackers' console line)
        self.stall_arms: list[Callable[[Stall], None]] = []  # told before its record is written (next-step profile)
        self.trackers: Any = None  # the trackers (verl_otel/trackers.py), made on first use by its accessor
        from verl_otel.export.flusher import Flusher, ShutdownBudget
        from verl_otel.export.ray_store import ProcessTargets
        from verl_otel.export.run_end import RunEnds
        from verl_otel.export.unsent import UnsentSpans

        self.unsent = UnsentSpans(settings.data_dir)  # the OTLP push's span buffers, spilled at exit
        # the signals that end this process (export/run_end.py): a trainer's open step is written at once
        self.ends = RunEnds(settings, self.unsent, lambda: self.process_role)
        self.flusher = Flusher(self._flush_exports)
        self.targets = ProcessTargets(settings.data_dir, self.flusher.submit, self.flusher.every_tick)  # /metrics pages
        self.budget = ShutdownBudget(settings.shutdown_timeout_s)  # every wait at fit end and exit

    # -- identity --------------------------------------------------------------------------------
    def wire(
        self,
        process_role: str,
        *,
        index: int | None = None,
        project: Any = None,
        experiment: Any = None,
        setup: Callable[[Runtime], None] | None = None,
        key: str | None = None,
    ) -> None:
        """This process is a ``process_role``: declare it (before its first span), start the metric exporters and
        run its ``setup`` once per ``key`` (default: ``process_role``); tells :func:`on_process_role`'s listeners
        (what of verl is hooked here) once per process role. Never raises."""
        key = key or process_role
        if key in self._wired:
            return
        with self._lock:
            if key in self._wired:
                return
            self._wired.add(key)  # one try: a set-up that failed is reported, not retried per call
            try:
                self.declare(process_role, index, project, experiment)
                self._start_metrics()
                if setup is not None:
                    setup(self)
            except Exception as exc:  # noqa: BLE001 - wiring never raises into verl
                what = f"telemetry set-up for {key} failed ({exc!r}); training continues, this part of it is off"
                warn_once(f"wire:{key}", what)
            if process_role not in self._reported:  # once per process role: its listeners (the start-up line)
                self._reported.add(process_role)
                for tell in list(_on_process_role):
                    try:
                        tell(process_role)
                    except Exception as exc:  # noqa: BLE001
                        warn_once("coverage", f"cannot say which hooks are on ({exc!r})")

    def own_trackers(self, make: Callable[[Runtime], Any]) -> Any:
        """This runtime's trackers, made once by ``make`` (verl_otel/trackers.py::current)."""
        with self._lock:
            self.trackers = self.trackers or make(self)
            return self.trackers

    def wired(self, key: str) -> bool:
        return key in self._wired

    def declare(self, process_role: str, index: int | None = None, project: Any = None, experiment: Any = None) -> None:
        """What this process is, its index in that process role (the resource is fixed once the first span exists)."""
        with self._lock:
            if self._tracer is None:
                self._process_role = (process_role, index)
            if project:
                self._run[sc.RES_PROJECT] = str(project)[:256]
            if experiment:
                self._run[sc.RES_EXPERIMENT] = str(experiment)[:256]

    def _resource(self) -> Any:
        from verl_otel.export.providers import resource

        return resource(*self._process_role, self._run, self.settings.deprecated_names)

    @property
    def process_role(self) -> str:
        return self._process_role[0]

    def run_labels(self) -> dict[str, str]:
        """Target labels of this process for Prometheus (same names as the push path's)."""
        labels = {sc.LABEL_PROCESS_ROLE: self._process_role[0]}
        if sc.RES_PROJECT in self._run:
            labels[sc.LABEL_PROJECT] = self._run[sc.RES_PROJECT]
        if sc.RES_EXPERIMENT in self._run:
            labels[sc.LABEL_EXPERIMENT] = self._run[sc.RES_EXPERIMENT]
        return labels

    # -- traces -------------------------------------------------------------------------------------
    @property
    def tracer(self) -> trace.Tracer:
        tracer = self._tracer
        if tracer is not None:
            return tracer
        with self._lock:
            if self._tracer is None:
                self._tracer = self._make_tracer()
            return self._tracer

    def _make_tracer(self) -> trace.Tracer:
        given = _given.get("tracer_provider")
        if given is not None:
            self._provider, self.destination = given, "the tracer provider given to instrument()"
            return given.get_tracer(sc.INSTRUMENTATION_NAME, sc.INSTRUMENTATION_VERSION)
        if self.settings.console_only:  # the console observers get their events from the trackers, not from spans
            self.destination = "nowhere (console only: VERL_PROGRESS_LOG without telemetry)"
            return trace.NoOpTracer()
        try:
            from verl_otel.export import providers

            providers.quiet_sdk_logs()
            res = self._resource()
            self._provider, self.destination = providers.tracer_provider(
                self.settings, res, self.store.drop, on_buffer=self.unsent.add
            )
            logger.debug("spans of pid %s go to %s", os.getpid(), self.destination)
            return self._provider.get_tracer(sc.INSTRUMENTATION_NAME, sc.INSTRUMENTATION_VERSION)
        except Exception as exc:  # noqa: BLE001 - degrade to no spans, never raise
            warn_once("tracer", f"cannot set up span export ({exc!r}); spans are off in pid {os.getpid()}")
            return trace.NoOpTracer()

    def engine_provider(self, span_attributes: dict[str, Any] | None = None) -> Any:
        """A tracer provider for an inference engine running in this process (vLLM's request spans), to the
        same destination as ours; it records only spans whose parent is a sampled context (a request that
        carried one of our samples' contexts), never roots. None when spans are off here."""
        with self._lock:
            if self._engine_provider is None and self._provider is None:
                self.tracer  # noqa: B018 - the resource (the process role) is fixed with our tracer
            if self._engine_provider is None and self._provider is not None and _given.get("tracer_provider") is None:
                try:
                    from verl_otel.export import providers

                    res = getattr(self._provider, "resource", None) or self._resource()
                    self._engine_provider, _ = providers.tracer_provider(
                        self.settings,
                        res,
                        self.store.drop,
                        children_only=True,
                        span_attributes=span_attributes,
                        on_buffer=self.unsent.add,
                        every_tick=self.every_tick,
                    )
                except Exception as exc:  # noqa: BLE001 - no engine spans, never raise
                    warn_once(
                        "engine-tracer",
                        f"cannot set up the engine's span export ({exc!r}); engine spans are off in pid {os.getpid()}",
                    )
            return self._engine_provider

    def add_scrape_target(self, host: str, port: int, labels: dict[str, str]) -> None:
        """List another /metrics page of this process' making (a rollout server's vLLM page) where the run's
        Prometheus finds it (file_sd, Ray's store), on the flusher; it is taken out again at exit."""
        if not self.settings.console_only:
            self.targets.add(host, port, labels)

    def discover(self) -> None:
        """The Ray driver: every node's processes listed for Prometheus (export/discovery.py). Never raises."""
        with self._lock:
            if self._cluster is None and not self.settings.console_only:
                from verl_otel.export.discovery import start

                self._cluster = start(self.settings, self.every_tick)

    # -- stalls -------------------------------------------------------------------------------------
    @property
    def stalls(self) -> StallWatch | None:
        """This process' stall watch (None when VERL_OTEL_STALL=0 or it cannot be made): hooks call its
        ``enter``/``exit`` around the calls they see; its thread dumps evidence through a writer of export/."""
        watch = self._stalls
        if watch is not None or not self.settings.stall.enabled:
            return watch or None
        with self._lock:
            if self._stalls is None:
                self._stalls = self._make_stall_watch() or False
            return self._stalls or None

    def _make_stall_watch(self) -> StallWatch | None:
        try:
            from verl_otel.export import captures, stall_evidence

            return StallWatch(
                self.settings.stall,
                tracer=lambda: self.tracer,
                store=self.store,
                flush_soon=self.flush_soon,
                evidence=stall_evidence.for_settings(self.settings),
                process_role=lambda: self.process_role,
                on_stall=lambda stall: [tell(stall) for tell in list(self.stall_listeners)],
                on_detect=lambda stall: [tell(stall) for tell in list(self.stall_arms)],
                capture=captures.for_settings(self.settings),
            )
        except Exception as exc:  # noqa: BLE001 - no stall detection, never raise
            warn_once("stalls", f"cannot set up stall detection ({exc!r}); it is off in pid {os.getpid()}")
            return None

    # -- metrics ------------------------------------------------------------------------------------
    def _start_metrics(self) -> None:
        if self._metrics_started:
            return
        self._metrics_started = True
        if self.settings.console_only and _given.get("meter_provider") is None:
            return  # no /metrics server, no file_sd entry, no OTLP push
        from verl_otel.export import gpu_sampler, providers
        from verl_otel.export.process_memory import ResidentMemory

        for reason in sc.DROP_REASONS:  # counters start at 0, so "nothing dropped" is a visible 0
            self.store.drop(reason, 0)
        providers.start_pull(self.store, self.settings, self.run_labels(), self.targets.add)
        self.every_tick(ResidentMemory(self.store))  # read on the flusher's tick, never a training thread
        self.gpus = gpu_sampler.start_for(self.process_role, self.store)  # a GPU process' own GPUs, on its own thread
        res = None
        if self.settings.metrics_endpoint is not None and _given.get("meter_provider") is None:
            self.tracer  # noqa: B018 - the resource is the tracer provider's
            res = getattr(self._provider, "resource", None) or self._resource()
        self._meter_provider = providers.start_push(self.store, self.settings, res, _given.get("meter_provider"))

    # -- flushing -----------------------------------------------------------------------------------
    def flush_soon(self) -> None:
        """Ask the flusher to export what has ended. Never blocks (safe on a training thread)."""
        self.flusher.request()

    def flush_wait(self, timeout_s: float | None = None) -> bool:
        """Flush and wait: fit end, process exit. Without ``timeout_s``, all such waits of a process together
        last at most VERL_OTEL_SHUTDOWN_TIMEOUT seconds (a collector that never answers costs that once)."""
        if self._provider is None and self._meter_provider is None:
            return True
        ticket = self.flusher.request()
        if timeout_s is not None:
            return self.flusher.wait(ticket, timeout_s)
        done = self._wait_in_budget(ticket)
        if self.budget.left_s() <= 0:
            self.spill_unsent()  # the budget is spent: nothing more will be waited for in this process
        return done

    def finish(self) -> None:
        """Process exit: take this process' /metrics out of the file_sd list and export what is left,
        on the flusher thread, within what is left of VERL_OTEL_SHUTDOWN_TIMEOUT."""
        jobs = self.targets.remove_all()  # jobs run before the flush the wait below asks for
        if self._cluster:
            jobs += 1
            self.flusher.submit(self._cluster.close)
        if jobs or self._provider is not None or self._meter_provider is not None:
            self._wait_in_budget(self.flusher.request())
        self.spill_unsent()

    def spill_unsent(self) -> int:  # what the collector did not take in time goes to unsent/; returns how many
        return self.unsent.spill(self.destination)

    def _wait_in_budget(self, ticket: int) -> bool:
        return self.budget.spend(lambda left: self.flusher.wait(ticket, left))

    def every_tick(self, task: Callable[[], object]) -> None:  # run on the flusher thread, every tick
        self.flusher.every_tick(task)

    def _flush_exports(self) -> None:
        """On the flusher thread only (the SDK's force_flush exports on the calling thread)."""
        timeout_ms = int(self.settings.shutdown_timeout_s * 1000)
        for provider in (self._provider, self._engine_provider, self._meter_provider):
            flush = getattr(provider, "force_flush", None)
            if flush is not None:
                flush(timeout_ms)


_current: Runtime | None = None
_lock = threading.Lock()


def current() -> Runtime:
    """This process' runtime (made on first use, and anew in a forked child). Never raises."""
    rt = _current
    if rt is not None and rt.pid == os.getpid():
        return rt
    try:
        return _make()
    except Exception as exc:  # noqa: BLE001 - the last boundary: a runtime with the defaults
        warn_once("runtime", f"telemetry set-up failed ({exc!r}); using the defaults")
        return _fallback()


def _fallback() -> Runtime:
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid():
            _current = Runtime(cfg.load({}, report=False))
        return _current


def _make() -> Runtime:
    global _current
    with _lock:
        if _current is not None and _current.pid == os.getpid():
            return _current
        cfg.apply_job_otel()  # the driver's OTEL_* reach this process now: verl-otel instruments it
        for line in cfg.sanitize_otel_env():
            warn_once(f"setting:{line}", line)
        try:
            settings = cfg.load()
        except Exception as exc:  # noqa: BLE001 - never: load() is total; kept as the last boundary
            warn_once("settings", f"cannot read the settings ({exc!r}); using the defaults")
            settings = cfg.load({})
        _current = Runtime(settings)
        atexit.register(_at_exit, _current)
        return _current


def _at_exit(rt: Runtime) -> None:
    """Export what is left, within VERL_OTEL_SHUTDOWN_TIMEOUT (the SDK's exit hooks wait without a deadline)."""
    with contextlib.suppress(Exception):
        if rt.pid == os.getpid():
            rt.finish()


def preset_span_id(span_id: int | None) -> contextlib.AbstractContextManager[None]:
    """The next span this thread starts on our tracer gets ``span_id`` (None: a random one, as always)."""
    if not span_id:
        return contextlib.nullcontext()
    try:
        from verl_otel.export.providers import preset_span_id as preset
    except Exception:  # noqa: BLE001 - no SDK: a random id
        return contextlib.nullcontext()
    return preset(span_id)


def configure(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Use the caller's providers (``instrument(tracer_provider=..., meter_provider=...)``), as the
    contrib instrumentors do. Takes effect for parts not made yet."""
    with _lock:
        given = (("tracer_provider", tracer_provider), ("meter_provider", meter_provider))
        _given.update((key, part) for key, part in given if part is not None)


def reset_for_tests() -> None:
    """Forget this process' runtime, its trackers and given providers (tests switch settings between runs)."""
    global _current
    with _lock:
        rt, _current = _current, None
        _given.clear()
    if rt is not None and rt._stalls:
        rt._stalls.stop()  # its thread ends at its next tick
    if rt is not None and rt.trackers is not None:
        with contextlib.suppress(Exception):
            rt.trackers.close()  # the trackers' threads and exit hook
    if rt is not None and rt._provider is not None and hasattr(rt._provider, "shutdown"):
        with contextlib.suppress(Exception):  # a provider that fails to shut down is dropped all the same
            rt._provider.shutdown()
