"""The two dashboards, panel by panel. Every query is built from semconv names (m(), key())."""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.dashboards.grafana import (
    JAEGER_DS,
    SLOW_STEPS_SEARCHED,
    Annotation,
    Dashboard,
    Panel,
    Target,
    explore_link,
    jaeger_step_search,
    key,
    m,
)
from verl_otel.semconv import DCGM_FB_FREE, DCGM_FB_USED

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
    1,
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
    grid=(0, 0, 8, 4),
)
RUN_ETA = Panel(
    2,
    "Run ETA",
    "Time left: mean of the last 5 step durations x steps left. Healthy: falls steadily; a jump means slower steps.",
    "stat",
    (
        Target(f"max by ({_RUN}) ({m(sc.TRAINING_ETA.name)})", "ETA {{verl_experiment}}"),
        Target(f"max by ({_RUN}) ({m(sc.TRAINING_STEP.name)})", "step {{verl_experiment}}", unit="none"),
    ),
    unit="s",
    grid=(8, 0, 8, 4),
)
PHASE_NOW = Panel(
    3,
    "Phase running now",
    "The phase in progress and its live elapsed time (the heartbeat): growing = working; compare with the "
    "phase's usual duration to tell slow from hung.",
    # elapsed and active come from the same process with the same labels: plain one-to-one matching
    "stat",
    (Target(f"max by ({_RUN}, phase) ({m(sc.PHASE_ELAPSED.name)} and {m(sc.PHASE_ACTIVE.name)} == 1)", "{{phase}}"),),
    unit="s",
    grid=(16, 0, 8, 4),
    cpu_empty="between steps no phase runs (the demo spends most of its time in startup)",
)
ROLLOUT_BARS = Panel(
    4,
    "Rollout progress per agent-loop worker",
    "Finished / expected samples of the current rollout on each agent-loop worker, and the total. Healthy: "
    "all bars move together; one stuck bar is a stuck worker or a lost request.",
    "bargauge",
    (
        Target(
            f"sum by (worker, mode) ({m(sc.ROLLOUT_SAMPLES_COMPLETED.name)}) / "
            f"sum by (worker, mode) ({m(sc.ROLLOUT_SAMPLES_EXPECTED.name)})",
            "worker {{worker}} {{mode}}",
        ),
        Target(
            f"sum by (mode) ({m(sc.ROLLOUT_SAMPLES_COMPLETED.name)}) / "
            f"sum by (mode) ({m(sc.ROLLOUT_SAMPLES_EXPECTED.name)})",
            "total {{mode}}",
        ),
    ),
    unit="percentunit",
    max=1,
    grid=(0, 4, 12, 8),
)
ROLLOUT_ETA = Panel(
    5,
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
    grid=(12, 4, 12, 8),
)
UPDATE_BARS = Panel(
    6,
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
    grid=(0, 12, 12, 6),
)
UPDATE_ETA = Panel(
    7,
    "Update ETA and epoch",
    "Seconds left in the current actor/critic update and its PPO epoch.",
    "stat",
    (
        Target(f"max by (role) ({m(sc.UPDATE_ETA.name)})", "ETA {{role}}"),
        Target(f"max by (role) ({m(sc.UPDATE_EPOCH.name)})", "epoch {{role}}", unit="none"),
    ),
    unit="s",
    grid=(12, 12, 12, 6),
)
STEP_STACK = Panel(
    8,
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
    grid=(0, 18, 12, 8),
)
STEP_DURATION = Panel(
    9,
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
    grid=(12, 18, 12, 8),
    links=(_TRACE_LINK,),
    cpu_empty="rate() needs two steps inside the rate window",
)
SLOW_STEPS = Panel(
    10,
    "Slowest recent steps of $experiment (Jaeger)",
    f"The last {SLOW_STEPS_SEARCHED} step traces of the experiment from Jaeger (service $service, one table per "
    "selected experiment), slowest first; click a trace ID to open the step and see which phase made it slow (or "
    "run `verl-otel slow-steps`). Healthy: durations close to each other.",
    "traces-table",
    (),
    grid=(0, 26, 12, 8),
    repeat="experiment",
)
PHASE_DURATION = Panel(
    11,
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
    grid=(12, 26, 12, 8),
    cpu_empty="rate() needs two phase runs inside the rate window",
)
DROPPED = Panel(
    12,
    "Telemetry dropped",
    "Items verl-otel dropped (non-scalar or NaN metric values, key cap, export failures). Healthy: 0 or a "
    "constant trickle of non-scalars.",
    "timeseries",
    (Target(f"sum by (reason) ({m(sc.OTEL_DROPPED.name)})", "{{reason}}"),),
    grid=(0, 34, 24, 6),
)

# -- fully_async: the rollouter beside the trainer ------------------------------------------------------
_ASYNC_ONLY = "fully_async only (`verl-otel demo --trainer fully_async`)"
ASYNC_VERSIONS = Panel(
    13,
    "Async rollout: parameter version and staleness",
    "Trainer and rollouter parameter versions, and the largest / mean staleness (versions behind) of the last "
    "batch the trainer took. Healthy: the versions move together and staleness stays at or below "
    "async_training.staleness_threshold.",
    "timeseries",
    (
        Target(f"max by (role) ({m(sc.ASYNC_PARAM_VERSION.name)})", "version {{role}}"),
        Target(f"max({m(sc.ASYNC_STALENESS.name)})", "staleness max"),
        Target(f"max({m(sc.ASYNC_STALENESS_MEAN.name)})", "staleness mean"),
    ),
    grid=(0, 40, 12, 8),
    cpu_empty=_ASYNC_ONLY,
)
ASYNC_QUEUE = Panel(
    14,
    "Async rollout: MessageQueue depth",
    "Samples waiting between rollouter and trainer (as each side last saw it) against the queue's limit. "
    "Healthy: between the trainer's batch size and the limit; at the limit the rollouter pauses, near 0 the "
    "trainer waits.",
    "timeseries",
    (
        Target(f"max by (role) ({m(sc.ASYNC_QUEUE_DEPTH.name)})", "depth seen by {{role}}"),
        Target(f"max({m(sc.ASYNC_QUEUE_CAPACITY.name)})", "limit"),
    ),
    grid=(12, 40, 12, 8),
    cpu_empty=_ASYNC_ONLY,
)
ASYNC_IDLE = Panel(
    15,
    "Async rollout: idle ratio",
    "Share of the current parameter-version window each side spent idle: the trainer waiting for samples, the "
    "rollouter paused; and whether the rollouter is paused now. Healthy: both low; a trainer near 1 is "
    "rollout-bound, a rollouter near 1 is held back by the staleness limit.",
    "timeseries",
    (
        Target(f"max by (role) ({m(sc.ASYNC_IDLE_RATIO.name)})", "idle {{role}}"),
        Target(f"max({m(sc.ASYNC_ROLLOUTER_PAUSED.name)})", "rollouter paused"),
    ),
    unit="percentunit",
    grid=(0, 48, 12, 8),
    cpu_empty=_ASYNC_ONLY,
)
ASYNC_PRODUCED = Panel(
    16,
    "Async rollout: samples produced",
    "Samples per second the rollouter puts into the queue, samples dropped by a full queue, and samples being "
    "generated now. Healthy: a steady rate, no drops.",
    "timeseries",
    (
        Target(f"sum(rate({m(sc.ASYNC_SAMPLES_PRODUCED.name)}[{_R}]))", "produced/s"),
        Target(f"sum(rate({m(sc.ASYNC_SAMPLES_DROPPED.name)}[{_R}]))", "dropped/s"),
        Target(f"sum({m(sc.ASYNC_ROLLOUTER_INFLIGHT.name)})", "in flight", unit="none"),
    ),
    grid=(12, 48, 12, 8),
    cpu_empty=_ASYNC_ONLY,
)

# -- Rollout engine (vLLM's own /metrics page of each rollout server, listed in file_sd by verl-otel) -------
#: a rollout server's page carries no run labels unless the run put them there: "|" admits their absence
_ENGINE_SEL = (
    f'{sc.LABEL_PROCESS_ROLE}="{sc.ROLE_ROLLOUT_SERVER}", {sc.LABEL_PROJECT}=~"$project|", '
    f'{sc.LABEL_EXPERIMENT}=~"$experiment|"'
)
_STUB = "vLLM's metrics exist only with the real vLLM rollout (verl-otel demo --rollout vllm); the stand-in has none"


def _e(name: str) -> str:
    return f"{name}{{{_ENGINE_SEL}}}"


def _quantiles(buckets: str, what: str) -> tuple[Target, ...]:
    return tuple(
        Target(
            f"histogram_quantile({q}, sum by (le, {sc.LABEL_REPLICA}) (rate({_e(buckets)}[{_R}])))",
            f"{what} p{int(q * 100)} replica {{{{replica}}}}",
        )
        for q in (0.5, 0.95)
    )


ENGINE_REQUESTS = Panel(
    17,
    "Rollout engine: requests running / waiting",
    "vLLM's requests being generated and queued, per rollout replica. Healthy: running near the batch's "
    "concurrency, waiting 0 or draining; waiting with nothing running is a stuck engine.",
    "timeseries",
    (
        Target(f"sum by ({sc.LABEL_REPLICA}) ({_e(sc.VLLM_REQUESTS_RUNNING)})", "running {{replica}}"),
        Target(f"sum by ({sc.LABEL_REPLICA}) ({_e(sc.VLLM_REQUESTS_WAITING)})", "waiting {{replica}}"),
    ),
    grid=(0, 56, 8, 8),
    cpu_empty=_STUB,
)
ENGINE_KV = Panel(
    18,
    "Rollout engine: KV-cache usage and preemptions",
    "Share of the KV cache in use, and preemptions per second (requests evicted for lack of KV cache, recomputed "
    "later). Healthy: usage below 1, no preemptions; a full cache with preemptions makes long samples slow.",
    "timeseries",
    (
        Target(f"max by ({sc.LABEL_REPLICA}) ({_e(sc.VLLM_KV_CACHE_USAGE)})", "KV cache {{replica}}"),
        Target(
            f"sum by ({sc.LABEL_REPLICA}) (rate({_e(sc.VLLM_PREEMPTIONS)}[{_R}]))",
            "preemptions/s {{replica}}",
            unit="short",
        ),
    ),
    unit="percentunit",
    grid=(8, 56, 8, 8),
    cpu_empty=_STUB,
)
ENGINE_TOKENS = Panel(
    19,
    "Rollout engine: generation tokens/s",
    "Tokens generated per second per rollout replica. Healthy: flat during rollouts; a drop with the same "
    "requests running means slower decoding (preemptions, long contexts).",
    "timeseries",
    (Target(f"sum by ({sc.LABEL_REPLICA}) (rate({_e(sc.VLLM_GENERATION_TOKENS)}[{_R}]))", "tokens/s {{replica}}"),),
    grid=(16, 56, 8, 8),
    cpu_empty=_STUB,
)
ENGINE_LATENCY = Panel(
    20,
    "Rollout engine: time to first token and per-token latency",
    "p50 and p95 of the time to the first token (queue + prefill) and of the time between output tokens "
    "(decode), per replica. Healthy: a stable TTFT; a rising one means requests queue (see waiting).",
    "timeseries",
    (*_quantiles(sc.VLLM_TTFT_BUCKET, "TTFT"), *_quantiles(sc.VLLM_TPOT_BUCKET, "per token")),
    unit="s",
    grid=(0, 64, 24, 8),
    cpu_empty=_STUB,
)

# -- annotations (both dashboards) ---------------------------------------------------------------------
_VALIDATE_COUNT = m(sc.PHASE_DURATION.name + "_count", f'{sc.LABEL_PHASE}="{sc.PHASE_VALIDATE}"')
ANNOTATIONS = (
    Annotation(
        "Alerts firing",
        # alerts without run labels (the pipeline's, DCGM's memory) show under every selection: "|" admits the
        # label's absence
        f'{sc.PROM_ALERTS}{{alertstate="firing", {sc.LABEL_PROJECT}=~"$project|", '
        f'{sc.LABEL_EXPERIMENT}=~"$experiment|"}}',
        "{{alertname}}",
        "{{severity}} {{verl_experiment}} {{instance}}",
        "red",
        cpu_empty="no rule fires on the healthy CPU demo (and its Prometheus loads none)",
    ),
    # each validation run adds one to the validate phase's histogram count (push and pull path alike)
    Annotation(
        "Validation runs",
        f"max by ({_RUN}) (changes({_VALIDATE_COUNT}[1m])) > 0",
        "validation",
        "{{verl_experiment}}",
        "blue",
    ),
)

PROGRESS = Dashboard(
    "verl-training-progress",
    "verl training progress",
    "Where a verl run is now: run, rollout and update progress with ETAs, the phase running now, step times.",
    (
        RUN_PROGRESS,
        RUN_ETA,
        PHASE_NOW,
        ROLLOUT_BARS,
        ROLLOUT_ETA,
        UPDATE_BARS,
        UPDATE_ETA,
        STEP_STACK,
        STEP_DURATION,
        SLOW_STEPS,
        PHASE_DURATION,
        DROPPED,
        ASYNC_VERSIONS,
        ASYNC_QUEUE,
        ASYNC_IDLE,
        ASYNC_PRODUCED,
        ENGINE_REQUESTS,
        ENGINE_KV,
        ENGINE_TOKENS,
        ENGINE_LATENCY,
    ),
    annotations=ANNOTATIONS,
)


# -- verl training health (the signals of the log-reading guides) -------------------------------------
_NO_CRITIC = "critic metrics exist only with a critic (algorithm.adv_estimator=gae); the demo runs GRPO"
_NO_DCGM = "DCGM exporter runs only with `--profile gpu` on an NVIDIA host"


def _curve(
    pid: int,
    title: str,
    description: str,
    keys: list[tuple[str, ...]],
    grid: tuple[int, int, int, int],
    unit: str = "short",
    cpu_empty: str | None = None,
) -> Panel:
    """A panel of training curves; each key is (verl key, legend[, why it may be empty on a CPU run])."""
    return Panel(
        pid,
        title,
        description,
        "timeseries",
        tuple(
            Target(f"max by ({sc.LABEL_KEY}) ({key(k[0])})", k[1], cpu_empty=k[2] if len(k) > 2 else None) for k in keys
        ),
        unit=unit,
        grid=grid,
        cpu_empty=cpu_empty,
    )


HEALTH = Dashboard(
    "verl-training-health",
    "verl training health",
    "Is the run learning? The signals verl logs each step, with what healthy looks like.",
    (
        _curve(
            1,
            "Score / reward",
            "critic/score/mean and critic/rewards/mean: the core signal. Healthy: rises "
            "over steps; stuck at 0 means nothing is learned (reward too strict, wrong answer format).",
            [(sc.KEY_SCORE_MEAN, "score"), (sc.KEY_REWARD_MEAN, "reward")],
            (0, 0, 12, 8),
        ),
        _curve(
            2,
            "Validation score",
            "val-core/* (verl >= 0.4) or val/test_score/* (older verl, the guides' GSM8K "
            "accuracy) on the test set. Healthy: rises with the train score; train up but val flat = overfitting "
            "or reward hacking.",
            [(f"{sc.KEY_VAL_CORE_RE}|{sc.KEY_VAL_TEST_SCORE_RE}", "{{key}}")],
            (12, 0, 12, 8),
        ),
        _curve(
            3,
            "KL",
            "actor/kl_loss (KL to the reference policy, with use_kl_loss) and actor/ppo_kl (drift of one "
            "update). Healthy: small (1e-3..1e-2); a blow-up (>0.05) means the policy drifts off: lower the "
            "temperature or raise the KL coefficient; never count KL twice (in the loss and in the reward).",
            [
                (sc.KEY_PPO_KL, "ppo_kl"),
                (sc.KEY_KL_LOSS, "kl_loss"),
                (sc.KEY_REWARD_KL, "reward_kl_penalty", "with the KL in the reward only (the demo uses the loss)"),
            ],
            (0, 8, 12, 8),
        ),
        _curve(
            4,
            "Entropy",
            "actor/entropy. Healthy: roughly 0.4-0.6 and slowly falling; a collapse towards 0 "
            "means no exploration left.",
            [(sc.KEY_ENTROPY, "entropy")],
            (12, 8, 12, 8),
        ),
        _curve(
            5,
            "Gradient norm",
            "actor/grad_norm and critic/grad_norm. Healthy: stable; a sudden spike is a gradient explosion.",
            [(sc.KEY_ACTOR_GRAD_NORM, "actor"), (sc.KEY_CRITIC_GRAD_NORM, "critic", _NO_CRITIC)],
            (0, 16, 12, 8),
        ),
        _curve(
            6,
            "Policy and value loss",
            "actor/pg_loss and critic/vf_loss. Healthy: bounded and noisy around a "
            "slowly moving level; an exploding vf_loss points at an unstable return scale.",
            [(sc.KEY_PG_LOSS, "pg_loss"), (sc.KEY_VF_LOSS, "vf_loss", _NO_CRITIC)],
            (12, 16, 12, 8),
        ),
        _curve(
            7,
            "Clip fraction",
            "actor/pg_clipfrac: share of tokens the PPO ratio clipped. Healthy: small "
            "(<0.2); near 1 means a too large learning rate or advantages.",
            [(sc.KEY_PG_CLIPFRAC, "clipfrac")],
            (0, 24, 12, 8),
            unit="percentunit",
        ),
        _curve(
            8,
            "Response length",
            "response_length/mean and /max, and the share clipped at the maximum. "
            "Healthy: stable or slowly changing; a rising clip ratio means responses hit max_response_length.",
            [
                (sc.KEY_RESPONSE_LENGTH_MEAN, "mean"),
                ("response_length/max", "max"),
                ("response_length/clip_ratio", "clip ratio"),
            ],
            (12, 24, 12, 8),
        ),
        _curve(
            9,
            "Throughput",
            "perf/throughput, tokens per second per GPU. Healthy: flat; a drop with a "
            "longer step time is a slow phase.",
            [(sc.KEY_THROUGHPUT, "tokens/s")],
            (0, 32, 12, 8),
        ),
        Panel(
            10,
            "Memory",
            "verl's [actor/]perf/max_memory_allocated_gb / reserved, each phase's peak GPU memory and, with "
            "the gpu profile, DCGM's used and total framebuffer per GPU. Healthy: well below the GPU's memory; "
            "reserved close to the total risks OOM.",
            "timeseries",
            # actor/perf/... since verl 0.9, perf/... before
            (
                Target(
                    f"max by ({sc.LABEL_KEY}) ({key('(.+/)?perf/max_memory_(allocated|reserved)_gb')}) * 2^30",
                    "{{key}}",
                ),
                Target(
                    f"max by (phase, role) ({m(sc.PHASE_PEAK_MEMORY.name)})",
                    "peak {{phase}} {{role}}",
                    cpu_empty="per-phase peak memory needs torch.cuda (a GPU)",
                ),
                # DCGM series carry no run labels: the GPUs of the hosts Prometheus scrapes, in MiB
                Target(
                    f"max by (gpu, Hostname) ({DCGM_FB_USED}) * 2^20", "GPU {{gpu}} used (DCGM)", cpu_empty=_NO_DCGM
                ),
                Target(
                    f"max by (gpu, Hostname) ({DCGM_FB_USED} + {DCGM_FB_FREE}) * 2^20",
                    "GPU {{gpu}} total (DCGM)",
                    cpu_empty=_NO_DCGM,
                ),
            ),
            unit="bytes",
            grid=(12, 32, 12, 8),
        ),
        _curve(
            11,
            "Timing per phase",
            "timing_s/* per step. Healthy: stable; a growing phase is the bottleneck "
            "(gen slower than update = rollout-bound).",
            [("timing_s/.*", "{{key}}")],
            (0, 40, 24, 8),
            unit="s",
        ),
    ),
    annotations=ANNOTATIONS,
)

DASHBOARDS: tuple[Dashboard, ...] = (PROGRESS, HEALTH)
