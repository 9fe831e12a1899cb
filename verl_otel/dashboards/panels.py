"""The two dashboards: the training-progress one panel by panel (its async and engine rows, the health
dashboard and the shared annotations in their own modules). Every query is built from semconv names (m(), key())."""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.dashboards import (
    async_panels,
    compare_panels,
    engine_panels,
    goodput_panels,
    timeline_panels,
    tool_panels,
    why_panels,
)
from verl_otel.dashboards.annotations import ANNOTATIONS
from verl_otel.dashboards.grafana import (
    JAEGER_DS,
    SLOW_STEPS_SEARCHED,
    Dashboard,
    Panel,
    Row,
    Target,
    explore_link,
    jaeger_step_search,
    key,
    laid_out,
    m,
)
from verl_otel.dashboards.health_panels import HEALTH

_R = "$__rate_interval"
_RUN = f"{sc.LABEL_PROJECT}, {sc.LABEL_EXPERIMENT}"  # one row per run when several are selected
#: the exemplar dots link to one step's trace (datasource provisioning); this link searches the steps of the run
#: whose line was clicked (its labels), under the dashboard's $service
_TRACE_LINK = explore_link(
    "search this run's step traces in Jaeger",
    [jaeger_step_search(f"${{__field.labels.{sc.LABEL_EXPERIMENT}}}", f"${{__field.labels.{sc.LABEL_PROJECT}}}")],
    JAEGER_DS["uid"],
)

# -- verl training progress --------------------------------------------------------------------------
RUN_PROGRESS = Panel(
    "Run progress",
    "Global step / planned steps (trainer.total_training_steps). Healthy: grows by one every step time.",
    "bargauge",
    (
        Target(
            f"max by ({_RUN}) ({m(sc.TRAINING_STEP.name)}) / max by ({_RUN}) ({m(sc.TRAINING_STEPS_PLANNED.name)})",
            "{{verl_experiment}}",
        ),
    ),
    unit="percentunit",
    max=1,
)
RUN_ETA = Panel(
    "Run ETA",
    "Time left: mean of the last 5 step durations x steps left. Healthy: falls steadily; a jump means slower steps.",
    "stat",
    (
        Target(f"max by ({_RUN}) ({m(sc.TRAINING_ETA.name)})", "ETA {{verl_experiment}}"),
        Target(f"max by ({_RUN}) ({m(sc.TRAINING_STEP.name)})", "step {{verl_experiment}}", unit="none"),
    ),
    unit="s",
)
PHASE_NOW = Panel(
    "Phase running now",
    "The phase in progress and its live elapsed time (the heartbeat): growing = working; compare with the "
    "phase's usual duration to tell slow from hung.",
    # elapsed and active come from the same process with the same labels: plain one-to-one matching
    "stat",
    (Target(f"max by ({_RUN}, phase) ({m(sc.PHASE_ELAPSED.name)} and {m(sc.PHASE_ACTIVE.name)} == 1)", "{{phase}}"),),
    unit="s",
    cpu_empty="between steps no phase runs (the demo spends most of its time in startup)",
)
ROLLOUT_BARS = Panel(
    "Rollout progress per agent-loop worker",
    "Finished / expected samples of the current rollout on each agent-loop worker, and the total. Healthy: "
    "all bars move together; one stuck bar is a stuck worker or a lost request.",
    "bargauge",
    (
        Target(
            f"sum by (rollout_worker, mode) ({m(sc.ROLLOUT_SAMPLES_COMPLETED.name)}) / "
            f"sum by (rollout_worker, mode) ({m(sc.ROLLOUT_SAMPLES_EXPECTED.name)})",
            "rollout worker {{rollout_worker}} {{mode}}",
        ),
        Target(
            f"sum by (mode) ({m(sc.ROLLOUT_SAMPLES_COMPLETED.name)}) / "
            f"sum by (mode) ({m(sc.ROLLOUT_SAMPLES_EXPECTED.name)})",
            "total {{mode}}",
        ),
    ),
    unit="percentunit",
    max=1,
)
ROLLOUT_ETA = Panel(
    "Rollout ETA and long tail",
    "Rollout ETA (elapsed / finished x remaining), samples in flight and the age of the oldest unfinished "
    "sample. Healthy: the oldest age stays near the typical sample time; a growing one is a lost request.",
    "stat",
    (
        Target(f"max by (mode) ({m(sc.ROLLOUT_ETA.name)})", "ETA {{mode}}"),
        Target(f"sum by (mode) ({m(sc.ROLLOUT_SAMPLES_INFLIGHT.name)})", "in flight {{mode}}", unit="none"),
        Target(f"max by (mode) ({m(sc.ROLLOUT_OLDEST_INFLIGHT.name)})", "oldest {{mode}}"),
    ),
    unit="s",
)
UPDATE_BARS = Panel(
    "Actor / critic update progress",
    "Optimizer mini-batches done / planned over all PPO epochs of the current update, with epoch and ETA. "
    "Healthy: fills once per step at an even pace.",
    "bargauge",
    (
        Target(
            f"max by (role) ({m(sc.UPDATE_MINIBATCHES_COMPLETED.name)}) / "
            f"max by (role) ({m(sc.UPDATE_MINIBATCHES_EXPECTED.name)})",
            "{{role}}",
        ),
    ),
    unit="percentunit",
    max=1,
)
UPDATE_ETA = Panel(
    "Update ETA and epoch",
    "Seconds left in the current actor/critic update and its PPO epoch.",
    "stat",
    (
        Target(f"max by (role) ({m(sc.UPDATE_ETA.name)})", "ETA {{role}}"),
        Target(f"max by (role) ({m(sc.UPDATE_EPOCH.name)})", "epoch {{role}}", unit="none"),
    ),
    unit="s",
)
STEP_STACK = Panel(
    "Step time by phase",
    "verl's own per-phase timings of each step, stacked (timing_s/*). Healthy: stable; the band that grows is "
    "the phase to look at.",
    "timeseries",
    (
        Target(
            f"max by ({sc.LABEL_KEY}) ("
            + key(
                "timing_s/(gen|reward|old_log_prob|ref|values|adv|update_critic|update_actor|"
                "save_checkpoint|update_weights|testing)"
            )
            + ")",
            "{{key}}",
        ),
    ),
    unit="s",
    stacked=True,
)
STEP_DURATION = Panel(
    "Step duration (exemplars link to the step's trace)",
    "Median (p50, from the buckets) and mean step duration of each run from the step histogram; each exemplar "
    "dot is one step, linked to its trace in Jaeger (Prometheus keeps exemplars on the buckets, so the p50 query "
    "carries them). Healthy: flat.",
    "timeseries",
    (
        Target(
            f"histogram_quantile(0.5, sum by ({_RUN}, le) (rate({m(sc.STEP_DURATION.name + '_bucket')}[{_R}])))",
            "p50 {{verl_experiment}}",
            exemplar=True,
        ),
        Target(
            f"sum by ({_RUN}) (rate({m(sc.STEP_DURATION.name + '_sum')}[{_R}])) / "
            f"sum by ({_RUN}) (rate({m(sc.STEP_DURATION.name + '_count')}[{_R}]))",
            "mean {{verl_experiment}}",
        ),
    ),
    unit="s",
    links=(_TRACE_LINK,),
    cpu_empty="rate() needs two steps inside the rate window",
)
SLOW_STEPS = Panel(
    "Slowest recent steps of $experiment (Jaeger)",
    f"The last {SLOW_STEPS_SEARCHED} step traces of the experiment from Jaeger (service $service, one table per "
    "selected experiment), slowest first; click a trace ID to open the step and see which phase made it slow (or "
    "run `verl-otel slow-steps`). Healthy: durations close to each other.",
    "traces-table",
    (),
    repeat="experiment",
)
PHASE_DURATION = Panel(
    "Phase duration (mean over the window)",
    "Mean duration of each phase from the phase histogram, and its median from the buckets, whose exemplar dots "
    "link to the step's trace. Healthy: each line flat.",
    "timeseries",
    (
        Target(
            f"sum by (phase) (rate({m(sc.PHASE_DURATION.name + '_sum')}[{_R}])) / "
            f"sum by (phase) (rate({m(sc.PHASE_DURATION.name + '_count')}[{_R}]))",
            "{{phase}}",
        ),
        Target(
            f"histogram_quantile(0.5, sum by (phase, le) (rate({m(sc.PHASE_DURATION.name + '_bucket')}[{_R}])))",
            "p50 {{phase}}",
            exemplar=True,
        ),
    ),
    unit="s",
    cpu_empty="rate() needs two phase runs inside the rate window",
)
DROPPED = Panel(
    "Telemetry dropped",
    "Items verl-otel dropped (non-scalar or NaN metric values, key cap, export failures). Healthy: 0 or a "
    "constant trickle of non-scalars.",
    "timeseries",
    (Target(f"sum by (reason) ({m(sc.OTEL_DROPPED.name)})", "{{reason}}"),),
)
STALLS = Panel(
    "Stalls",
    "1 while a process reports a call stalled (past its stall threshold) in a phase: its stacks are in the "
    "stalls/ folder of VERL_OTEL_DIR and a stall span is in the step's trace; `verl-otel doctor` explains it. "
    "Healthy: nothing (no series at all until a first stall).",
    "timeseries",
    (
        Target(
            f"max by ({_RUN}, {sc.LABEL_PROCESS_ROLE}, phase) ({m(sc.STALL_ACTIVE.name)})",
            "{{verl_process_role}} {{phase}}",
        ),
    ),
    max=1,
    cpu_empty="the demo does not stall unless asked to (verl-otel demo --hang PHASE@STEP=SECONDS)",
)

PROGRESS = Dashboard(
    "verl-training-progress",
    "verl training progress",
    "Where a verl run is now: run, rollout and update progress with ETAs, the phase running now, step times.",
    laid_out(
        (
            Row(4, RUN_PROGRESS, RUN_ETA, PHASE_NOW),
            Row(8, ROLLOUT_BARS, ROLLOUT_ETA),
            Row(6, UPDATE_BARS, UPDATE_ETA),
            Row(8, STEP_STACK, STEP_DURATION),
            Row(8, SLOW_STEPS, PHASE_DURATION),
            Row(6, DROPPED, STALLS),
            *async_panels.ROWS,
            *engine_panels.ROWS,
            *why_panels.ROWS,
            *timeline_panels.ROWS,
            *goodput_panels.ROWS,
            *tool_panels.ROWS,
        )
    ),
    annotations=ANNOTATIONS,
)

DASHBOARDS: tuple[Dashboard, ...] = (PROGRESS, HEALTH, compare_panels.COMPARE)
