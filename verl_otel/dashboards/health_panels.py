"""The training-health dashboard: the curves of the signals the log-reading guides name."""

from __future__ import annotations

from verl_otel import semconv as sc
from verl_otel.dashboards.annotations import ANNOTATIONS
from verl_otel.dashboards.grafana import (
    Dashboard,
    Panel,
    Row,
    Target,
    key,
    laid_out,
    m,
)
from verl_otel.semconv import DCGM_FB_FREE, DCGM_FB_USED

# -- verl training health (the signals of the log-reading guides) -------------------------------------
_NO_CRITIC = "critic metrics exist only with a critic (algorithm.adv_estimator=gae); the demo runs GRPO"
_NO_DCGM = "DCGM exporter runs only with `--profile gpu` on an NVIDIA host"


def _curve(
    title: str,
    description: str,
    keys: list[tuple[str, ...]],
    unit: str = "short",
    cpu_empty: str | None = None,
) -> Panel:
    """A panel of training curves; each key is (verl key, legend[, why it may be empty on a CPU run])."""
    return Panel(
        title,
        description,
        "timeseries",
        tuple(
            Target(f"max by ({sc.LABEL_KEY}) ({key(k[0])})", k[1], cpu_empty=k[2] if len(k) > 2 else None) for k in keys
        ),
        unit=unit,
        cpu_empty=cpu_empty,
    )


HEALTH = Dashboard(
    "verl-training-health",
    "verl training health",
    "Is the run learning? The signals verl logs each step, with what healthy looks like.",
    laid_out(
        (
            Row(
                8,
                _curve(
                    "Score / reward",
                    "critic/score/mean and critic/rewards/mean: the core signal. Healthy: rises "
                    "over steps; stuck at 0 means nothing is learned (reward too strict, wrong answer format).",
                    [(sc.KEY_SCORE_MEAN, "score"), (sc.KEY_REWARD_MEAN, "reward")],
                ),
                _curve(
                    "Validation score",
                    "val-core/* (verl >= 0.4) or val/test_score/* (older verl, the guides' GSM8K "
                    "accuracy) on the test set. Healthy: rises with the train score; train up but val flat = "
                    "overfitting or reward hacking.",
                    [(f"{sc.KEY_VAL_CORE_RE}|{sc.KEY_VAL_TEST_SCORE_RE}", "{{key}}")],
                ),
            ),
            Row(
                8,
                _curve(
                    "KL",
                    "actor/kl_loss (KL to the reference policy, with use_kl_loss) and actor/ppo_kl (drift of one "
                    "update). Healthy: small (1e-3..1e-2); a blow-up (>0.05) means the policy drifts off: lower the "
                    "temperature or raise the KL coefficient; never count KL twice (in the loss and in the reward).",
                    [
                        (sc.KEY_PPO_KL, "ppo_kl"),
                        (sc.KEY_KL_LOSS, "kl_loss"),
                        (
                            sc.KEY_REWARD_KL,
                            "reward_kl_penalty",
                            "with the KL in the reward only (the demo uses the loss)",
                        ),
                    ],
                ),
                _curve(
                    "Entropy",
                    "actor/entropy. Healthy: roughly 0.4-0.6 and slowly falling; a collapse towards 0 "
                    "means no exploration left.",
                    [(sc.KEY_ENTROPY, "entropy")],
                ),
            ),
            Row(
                8,
                _curve(
                    "Gradient norm",
                    "actor/grad_norm and critic/grad_norm. Healthy: stable; a sudden spike is a gradient explosion.",
                    [(sc.KEY_ACTOR_GRAD_NORM, "actor"), (sc.KEY_CRITIC_GRAD_NORM, "critic", _NO_CRITIC)],
                ),
                _curve(
                    "Policy and value loss",
                    "actor/pg_loss and critic/vf_loss. Healthy: bounded and noisy around a "
                    "slowly moving level; an exploding vf_loss points at an unstable return scale.",
                    [(sc.KEY_PG_LOSS, "pg_loss"), (sc.KEY_VF_LOSS, "vf_loss", _NO_CRITIC)],
                ),
            ),
            Row(
                8,
                _curve(
                    "Clip fraction",
                    "actor/pg_clipfrac: share of tokens the PPO ratio clipped. Healthy: small "
                    "(<0.2); near 1 means a too large learning rate or advantages.",
                    [(sc.KEY_PG_CLIPFRAC, "clipfrac")],
                    unit="percentunit",
                ),
                _curve(
                    "Response length",
                    "response_length/mean and /max, and the share clipped at the maximum. "
                    "Healthy: stable or slowly changing; a rising clip ratio means responses hit max_response_length.",
                    [
                        (sc.KEY_RESPONSE_LENGTH_MEAN, "mean"),
                        ("response_length/max", "max"),
                        ("response_length/clip_ratio", "clip ratio"),
                    ],
                ),
            ),
            Row(
                8,
                _curve(
                    "Throughput",
                    "perf/throughput, tokens per second per GPU. Healthy: flat; a drop with a "
                    "longer step time is a slow phase.",
                    [(sc.KEY_THROUGHPUT, "tokens/s")],
                ),
                Panel(
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
                            f"max by (gpu, Hostname) ({DCGM_FB_USED}) * 2^20",
                            "GPU {{gpu}} used (DCGM)",
                            cpu_empty=_NO_DCGM,
                        ),
                        Target(
                            f"max by (gpu, Hostname) ({DCGM_FB_USED} + {DCGM_FB_FREE}) * 2^20",
                            "GPU {{gpu}} total (DCGM)",
                            cpu_empty=_NO_DCGM,
                        ),
                    ),
                    unit="bytes",
                ),
            ),
            Row(
                8,
                _curve(
                    "Timing per phase",
                    "timing_s/* per step. Healthy: stable; a growing phase is the bottleneck "
                    "(gen slower than update = rollout-bound).",
                    [("timing_s/.*", "{{key}}")],
                    unit="s",
                ),
            ),
        )
    ),
    annotations=ANNOTATIONS,
)
