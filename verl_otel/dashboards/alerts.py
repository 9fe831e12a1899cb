"""Prometheus alert rules, generated from semconv names with thresholds as parameters (the health checks' rules,
which `top` shares, are declared in dashboards/health.py and placed here).
``python -m verl_otel.dashboards.build --threshold kl_max=0.1 --rules-out my-rules.yml`` writes a variant with
other thresholds; the committed deploy/prometheus/rules/verl-alerts.yml uses the defaults below (documented in
deploy/README.md)."""

from __future__ import annotations

from typing import Any

from verl_otel import semconv as sc
from verl_otel.dashboards import health
from verl_otel.dashboards.goodput_rules import goodput_rules
from verl_otel.dashboards.memory_rules import memory_rules
from verl_otel.dashboards.promql import BY, RUN, spike, training
from verl_otel.dashboards.rule import Record, Rule
from verl_otel.dashboards.stragglers import straggler_records, straggler_rules
from verl_otel.dashboards.thresholds import DEFAULTS, Thresholds, duration_seconds
from verl_otel.dashboards.tool_panels import tool_rules

__all__ = ["DEFAULTS", "Record", "Rule", "Thresholds", "duration_seconds", "records", "rule_groups", "rules"]

#: prometheus.yml's scrape jobs whose targets are the telemetry pipeline itself (not the run's processes, which end
#: with the run; not dcgm, down without `--profile gpu`)
COLLECTOR_JOB = "otel-collector"
PIPELINE_JOBS = (COLLECTOR_JOB, "alertmanager")
#: drop reasons that lose data the run meant to send; verl logs NaN (critic stats without a critic) and lists
#: on every step by design, so non_finite and non_scalar are not alerts
LOST_DATA_REASONS = (sc.DROP_EXPORT, sc.DROP_QUEUE, sc.DROP_KEY_CAP)
PIPELINE_GROUP = "verl-otel-pipeline"
ENGINE_GROUP = "verl-rollout-engine"
#: a rollout server's vLLM page (listed in file_sd by verl-otel): per replica, whatever its engines
ENGINE_BY = f"instance, {sc.LABEL_REPLICA}"
_ENGINE_CPU = "fires only when the rollout engine is overloaded or stuck (the CPU demo's is not, or is a stand-in)"


def pipeline_unhealthy(t: Thresholds) -> str:
    """Non-empty while the Collector is down or refuses metrics: the run's series then vanish or freeze whatever
    the trainer does, so the rules that read silence as a dead or stalled run must not fire."""
    return (
        f'(max({sc.PROM_UP}{{job="{COLLECTOR_JOB}"}} == 0) or '
        f"max(rate({sc.OTELCOL_REFUSED_POINTS}[{t.pipeline_window}]) > 0))"
    )


def _per_exporter(metrics: tuple[str, ...], window: str) -> str:
    """Rate of any of ``metrics`` (one per signal: spans, metric points) above 0, per Collector and exporter."""
    return " or ".join(f"sum by (instance, exporter) (rate({name}[{window}])) > 0" for name in metrics)


def _engine(name: str) -> str:
    return f'{name}{{{sc.LABEL_PROCESS_ROLE}="{sc.PROCESS_ROLE_ROLLOUT_SERVER}"}}'


def engine_rules(t: Thresholds) -> list[Rule]:
    """The rollout engine's (vLLM's) own signals: a full KV cache, preemptions, a stuck queue, no tokens."""
    waiting = f"sum by ({ENGINE_BY}) ({_engine(sc.VLLM_REQUESTS_WAITING)})"
    return [
        Rule(
            "VerlEngineKVCacheSaturated",
            f"(max by ({ENGINE_BY}) ({_engine(sc.VLLM_KV_CACHE_USAGE)}) > {t.engine_kv_cache_max:g}) "
            f"and on({ENGINE_BY}) ({waiting} > 0)",
            "5m",
            "warning",
            "rollout replica {{ $labels.replica }}: KV cache full with requests waiting",
            f"vLLM's KV cache is above {t.engine_kv_cache_max:.0%} in use while requests wait: samples queue "
            "(slow rollouts, long tails). Raise gpu_memory_utilization, lower max_num_seqs or the response length, "
            "or add rollout replicas.",
            cpu_empty=_ENGINE_CPU,
            group=ENGINE_GROUP,
        ),
        Rule(
            "VerlEnginePreemptionsClimbing",
            f"sum by ({ENGINE_BY}) (increase({_engine(sc.VLLM_PREEMPTIONS)}[{t.engine_preemption_window}])) "
            f"> {t.engine_preemptions_max:g}",
            "5m",
            "warning",
            "rollout replica {{ $labels.replica }}: vLLM keeps preempting requests",
            f"vLLM preempted more than {t.engine_preemptions_max:g} requests within {t.engine_preemption_window}: "
            "the KV cache is too small for the batch, preempted samples are recomputed (their rollout.sample "
            "spans carry verl.sample.preemptions).",
            cpu_empty=_ENGINE_CPU,
            group=ENGINE_GROUP,
        ),
        Rule(
            "VerlEngineStuck",
            f"({waiting} > 0) and on({ENGINE_BY}) (sum by ({ENGINE_BY}) ({_engine(sc.VLLM_REQUESTS_RUNNING)}) == 0)",
            "2m",
            "critical",
            "rollout replica {{ $labels.replica }}: requests wait and none runs",
            "vLLM has requests waiting and runs none: the engine is stuck or paused (a weight sync or sleep that "
            "never resumed, a dead engine core). The rollout will not finish.",
            cpu_empty=_ENGINE_CPU,
            group=ENGINE_GROUP,
        ),
        Rule(
            "VerlEngineNoTokens",
            f"(sum by ({ENGINE_BY}) ({_engine(sc.VLLM_REQUESTS_RUNNING)}) > 0) and on({ENGINE_BY}) "
            f"(sum by ({ENGINE_BY}) (increase({_engine(sc.VLLM_GENERATION_TOKENS)}[{t.engine_no_tokens_window}])) "
            "== 0)",
            t.engine_no_tokens_for,
            "critical",
            "rollout replica {{ $labels.replica }}: requests run and no token comes out",
            f"vLLM reports requests running but generated no token in {t.engine_no_tokens_window}: the engine core "
            "is hung (a dead or blocked engine process, a collective waiting across its GPUs, a stuck logits "
            "processor). Its samples will not finish; `verl-otel top` marks the replica STUCK.",
            cpu_empty=_ENGINE_CPU,
            group=ENGINE_GROUP,
        ),
    ]


def rules(t: Thresholds = DEFAULTS) -> list[Rule]:
    """Every alert, in the order of the rules file (group by group)."""
    out = [*_run_rules(t), *engine_rules(t), *straggler_rules(t), *memory_rules(t), *goodput_rules(t), *tool_rules(t)]
    groups = list(dict.fromkeys(r.group for r in out))
    return sorted(out, key=lambda r: groups.index(r.group))


def records(t: Thresholds = DEFAULTS) -> list[Record]:
    """Recording rules (the alerts above may read them)."""
    return straggler_records(t)


def _run_rules(t: Thresholds) -> list[Rule]:
    step, planned = sc.TRAINING_STEP.name, sc.TRAINING_STEPS_PLANNED.name
    hist = sc.STEP_DURATION.name
    mean_step = f"max by ({BY}) ({hist}_sum / {hist}_count)"
    quiet_if_pipeline_down = f"unless on() {pipeline_unhealthy(t)}"
    kl_keys = "|".join((sc.KEY_PPO_KL, sc.KEY_KL_LOSS, sc.KEY_REWARD_KL))
    score = training(sc.KEY_SCORE_MEAN)
    w = t.reward_flat_window
    lost = "|".join(LOST_DATA_REASONS)
    return [
        Rule(
            "VerlStepStalled",
            f"(time() - max by ({BY}) ({sc.TRAINING_LAST_STEP.name})) > on({BY}) "
            f"clamp_min({t.step_stall_factor:g} * {mean_step}, {t.step_stall_min_s:g}) "
            f"and on({BY}) (max by ({BY}) ({step}) < max by ({BY}) ({planned})) {quiet_if_pipeline_down}",
            "2m",
            "critical",
            "verl run {{ $labels.verl_experiment }}: no new global step",
            f"No step has finished for more than {t.step_stall_factor:g}x the typical step time "
            f"(at least {t.step_stall_min_s:g}s). Check the phase running now: slow or hung? (Quiet while the "
            "Collector is down or refusing data: VerlTelemetryTargetDown / VerlCollectorRefusingData say so.)",
        ),
        *health.PHASE_HUNG.alerts(t),
        Rule(
            "VerlStall",
            f"max by ({BY}, {sc.LABEL_PROCESS_ROLE}, {sc.LABEL_PHASE}) ({sc.STALL_ACTIVE.name}) > 0",
            t.stall_for,
            "critical",
            "{{ $labels.verl_process_role }} stalled in {{ $labels.phase }}: verl-otel doctor names the hang's root",
            "A call of this phase is past its stall threshold in this process (VERL_OTEL_STALL_SECONDS, or "
            "VERL_OTEL_STALL_FACTOR x its median): the process dumped its stacks to $VERL_OTEL_DIR/stalls/ and put a "
            "stall span in the step's trace. One hang stalls several processes (the stuck one and those waiting on "
            "it): `verl-otel doctor` groups them into one incident, names its root (where it is stuck, what to do "
            "next) and lists the processes waiting on it.",
        ),
        *health.ROLLOUT_STUCK.alerts(t),
        *health.SCORE_STUCK.alerts(t),
        Rule(
            "VerlRewardSpreadCollapsed",
            # verl logs no std of the training reward; max - min bounds it (std <= (max - min) / 2)
            f"(max by ({BY}) (max_over_time({training(sc.KEY_SCORE_MAX)}[30m])) - "
            f"max by ({BY}) (min_over_time({training(sc.KEY_SCORE_MIN)}[30m])) < {t.reward_spread_min:g}) "
            f"and on({BY}) (max by ({BY}) ({step}) >= {t.score_zero_min_steps:g})",
            "15m",
            "warning",
            "every sample gets the same score",
            f"critic/score/max - critic/score/min stayed below {t.reward_spread_min:g} for 30m: the reward's "
            "standard deviation collapsed, so group-relative advantages (GRPO) are 0 and nothing is learned. All "
            "right (saturated data) or all wrong (see VerlScoreStuckAtZero)? Harder prompts, a finer reward.",
        ),
        *health.GRAD_SPIKE.alerts(t),
        Rule(
            "VerlValueLossBlowUp",
            spike(sc.KEY_VF_LOSS, t.vf_loss_factor),
            "0m",
            "warning",
            "critic/vf_loss blew up",
            f"The critic's value loss is above {t.vf_loss_factor:g}x its 1h median: the critic diverges (value "
            "learning rate too high, or the return scale is unstable: check the reward's range).",
        ),
        *health.KL_BLOW_UP.alerts(t),
        Rule(
            "VerlKLTooSmallRewardFlat",
            f"(max by ({BY}) (avg_over_time({training(kl_keys)}[{w}])) < {t.kl_min:g}) "
            f"and on({BY}) (max by ({BY}) (avg_over_time({score}[{w}]) - avg_over_time({score}[{w}] offset {w})) "
            f"< {t.reward_flat_min_gain:g})",
            "15m",
            "warning",
            "KL near 0 and the score does not rise",
            f"Every KL verl logs stayed below {t.kl_min:g} over {w} and the mean score gained less than "
            f"{t.reward_flat_min_gain:g} against the {w} before: the KL term holds the policy in place. Lower the KL "
            "coefficient (e.g. 1e-3 -> 5e-4), or check the reward is not too strict (most samples 0).",
        ),
        *health.ENTROPY_COLLAPSE.alerts(t),
        Rule(
            "VerlEntropyOutOfBand",
            f"(avg_over_time({training(sc.KEY_ENTROPY)}[30m]) < {t.entropy_band_low:g}) or "
            f"(avg_over_time({training(sc.KEY_ENTROPY)}[30m]) > {t.entropy_band_high:g})",
            "30m",
            "info",
            'actor/entropy ({{ printf "%.2f" $value }}) outside its healthy band',
            f"The 30m mean entropy is outside {t.entropy_band_low:g}-{t.entropy_band_high:g}, the guides' band for a "
            "run still exploring: below, the policy turns deterministic (it falls slowly in a healthy run; see "
            "VerlEntropyCollapse); above, it samples near randomly (temperature too high, a diverging update).",
        ),
        *health.CLIPPING.alerts(t),
        *health.MEMORY_NEAR_LIMIT.alerts(t),
        *health.STEPS_SLOWER.alerts(t),
        Rule(
            "VerlRunGone",
            f"(max by ({RUN}) (max_over_time({step}[{t.run_gone_window}])) < max by ({RUN}) "
            f"(max_over_time({planned}[{t.run_gone_window}]))) unless on({RUN}) max by ({RUN}) ({step}) "
            f"{quiet_if_pipeline_down}",
            "2m",
            "critical",
            "verl run {{ $labels.verl_experiment }} disappeared before its last step",
            f"The run reported steps within {t.run_gone_window} but no longer does, short of its planned steps: "
            "the trainer crashed, was killed (OOM?) or lost its telemetry. Check the driver's log. (Quiet while "
            "the Collector is down or refusing data.)",
        ),
        # -- the telemetry pipeline itself ---------------------------------------------------------------------
        Rule(
            "VerlTelemetryTargetDown",
            f'{sc.PROM_UP}{{job=~"{"|".join(PIPELINE_JOBS)}"}} == 0',
            "2m",
            "critical",
            "{{ $labels.job }} is down",
            "Prometheus cannot scrape {{ $labels.instance }}: with the Collector down no run reports anything "
            "(VerlRunGone and VerlStepStalled keep quiet meanwhile); with Alertmanager down no alert is sent.",
            cpu_empty="no Collector or Alertmanager runs beside the CPU demo",
            group=PIPELINE_GROUP,
        ),
        Rule(
            "VerlCollectorExportFailing",
            _per_exporter((sc.OTELCOL_SEND_FAILED_SPANS, sc.OTELCOL_SEND_FAILED_POINTS), t.pipeline_window),
            "5m",
            "warning",
            "Collector exporter {{ $labels.exporter }} fails to send",
            f"The Collector's {{{{ $labels.exporter }}}} exporter dropped data after its retries within "
            f"{t.pipeline_window}: traces (otlp/jaeger) or metrics do not arrive; check that backend.",
            cpu_empty="no Collector runs beside the CPU demo",
            group=PIPELINE_GROUP,
        ),
        Rule(
            "VerlCollectorQueueFull",
            _per_exporter((sc.OTELCOL_ENQUEUE_FAILED_SPANS, sc.OTELCOL_ENQUEUE_FAILED_POINTS), t.pipeline_window),
            "1m",
            "warning",
            "Collector exporter {{ $labels.exporter }} drops data: queue full",
            "The sending queue of the exporter is full and new data is dropped: the backend is slow or down.",
            cpu_empty="no Collector runs beside the CPU demo",
            group=PIPELINE_GROUP,
        ),
        Rule(
            "VerlCollectorRefusingData",
            f"sum by (instance) (rate({sc.OTELCOL_REFUSED_SPANS}[{t.pipeline_window}])) > 0 or "
            f"sum by (instance) (rate({sc.OTELCOL_REFUSED_POINTS}[{t.pipeline_window}])) > 0",
            "2m",
            "warning",
            "the Collector refuses data",
            "The Collector's receivers refuse spans or metric points: memory_limiter is above its limit (raise "
            "VERL_OTEL_COLLECTOR_MEMORY) or a pipeline fails. The run's metrics freeze, so VerlRunGone and "
            "VerlStepStalled keep quiet meanwhile.",
            cpu_empty="no Collector runs beside the CPU demo",
            group=PIPELINE_GROUP,
        ),
        Rule(
            "VerlTelemetryDropped",
            f'sum by ({BY}, {sc.LABEL_REASON}) (increase({sc.OTEL_DROPPED.name}{{{sc.LABEL_REASON}=~"{lost}"}}'
            f"[{t.dropped_window}])) > 0",
            "1m",
            "warning",
            "verl-otel lost telemetry ({{ $labels.reason }})",
            f"verl-otel dropped data in the last {t.dropped_window}: export_failed (the Collector is unreachable "
            "from this process), queue_full (more spans than the exporter drains) or key_cap (more metric keys "
            "than VERL_OTEL_MAX_METRIC_KEYS).",
            group=PIPELINE_GROUP,
        ),
    ]


def rule_groups(t: Thresholds = DEFAULTS) -> dict[str, Any]:
    all_rules = rules(t)
    recorded: list[Record | Rule] = list(records(t))
    names = list(dict.fromkeys([*(r.group for r in recorded), *(r.group for r in all_rules)]))
    return {
        "groups": [{"name": n, "rules": [r.to_dict() for r in recorded + all_rules if r.group == n]} for n in names]
    }
