"""ETA arithmetic, the seed's text bars and console lines, and the rollout/update trackers."""

import io

import pytest

from verl_otel import config
from verl_otel import semconv as sc
from verl_otel.progress.console import ProgressConsole, rollout_line, update_line
from verl_otel.progress.step_line import step_line
from verl_otel.telemetry.eta import RunEta, bar, rate_eta
from verl_otel.telemetry.rollout import RolloutTracker
from verl_otel.telemetry.steps import StepResult
from verl_otel.telemetry.update import UpdateTracker


def test_rate_eta():
    assert rate_eta(10.0, 0, 8) is None
    assert rate_eta(10.0, 2, 8) == pytest.approx(30.0)
    assert rate_eta(10.0, 8, 8) == 0.0
    assert rate_eta(5.0, 3, 0) is None


def test_run_eta_uses_recent_steps():
    eta = RunEta(window=2)
    for s in (100.0, 10.0, 20.0):
        eta.add_step(s)
    assert eta.eta(current_step=3, planned=10) == pytest.approx(15.0 * 7)
    assert eta.eta(current_step=10, planned=10) == 0.0
    assert RunEta().eta(1, 10) is None and eta.eta(1, None) is None


def test_bar_matches_seed_format():
    assert bar(128, 512, 20) == "[#####---------------]"
    assert bar(0, 0, 4) == "[----]" and bar(9, 4, 4) == "[####]"


def test_rollout_and_update_lines():
    assert rollout_line(8, 0, "train", 48, 64, 19.1, 20) == (
        "[VERL_PROGRESS][step=8][rollout_worker=0][train] [###############-----] 48/64 (75.0%) elapsed=19.1s eta=6.4s"
    )
    assert rollout_line(8, None, "validate", 0, 4, 1.0, 4).startswith(
        "[VERL_PROGRESS][step=8][rollout_manager][validate] [----] 0/4 (0.0%)"
    )
    assert update_line("actor", "dp", 6, 12, 40.1, 2, 3, 2, 4) == (
        "[VERL_PROGRESS][actor=dp][phase=update_policy] [###########-----------] 6/12 (epoch 2/3, mini 2/4) "
        "elapsed=40.1s eta=40.1s"
    )
    assert update_line("actor", "megatron", 14, 20, 92.4) == (  # the seed's megatron bar has no split
        "[VERL_PROGRESS][actor=megatron][phase=update_policy] [###############-------] 14/20 elapsed=92.4s eta=39.6s"
    )


def test_step_line_names_slowest_phase():
    line = step_line(StepResult(3, 10.0, {"rollout": 2.0, "update_actor": 6.0}, "ab" * 16, False), 5)
    assert line == "[verl-otel] step 3/5 took 10.0s, slowest phase update_actor 6.0s (60%)"


def test_progress_console_respects_log_interval():
    out = io.StringIO()
    settings = config.load_progress(
        {"VERL_PROGRESS_LOG": "1", "VERL_PROGRESS_LOG_INTERVAL": "2", "VERL_PROGRESS_HEARTBEAT_SEC": "100"}
    )
    console = ProgressConsole(settings, stream=out)
    for step in (1, 2):
        console.on_phase_start("update_actor", step)
        console.on_phase_end("update_actor", step, 1.5, "0" * 32)
    assert out.getvalue().splitlines() == [
        "[VERL_PROGRESS][step=2] update_actor start",
        "[VERL_PROGRESS][step=2] update_actor done: 1.50s",
    ]


def test_progress_settings_defaults_and_bad_values():
    s = config.load_progress({})
    assert (s.enabled, s.log_interval, s.heartbeat_s, s.rollout_worker_index, s.rollout_bar_width) == (
        False,
        1,
        5.0,
        0,
        24,
    )
    bad = config.load_progress(
        {"VERL_PROGRESS_LOG": "maybe", "VERL_PROGRESS_LOG_INTERVAL": "0", "VERL_ROLLOUT_PROGRESS_BAR_WIDTH": "wide"}
    )
    assert (bad.enabled, bad.log_interval, bad.rollout_bar_width) == (False, 1, 24)


def _gauges(tracker):
    return {(m.name, labels): v for m, labels, v in tracker.readings()}


def test_rollout_tracker_counts_and_finishes_once():
    t = RolloutTracker()
    t.worker = 1
    done = []
    t.on_batch_done.append(lambda w, b: done.append((w, b.mode, len(b.finished))))
    t.batch_started("train", 4, 3, None)
    tokens = [t.sample_started("train") for _ in range(3)]
    g = _gauges(t)
    assert g[("verl_rollout_samples_inflight", ("1", "train"))] == 3
    assert g[("verl_rollout_samples_expected", ("1", "train"))] == 3
    assert ("verl_rollout_eta_seconds", ("1", "train")) not in g  # unknown before the first sample
    for tok in tokens:
        t.sample_finished("train", tok, {"step": 4}, None)
    g = _gauges(t)
    assert g[("verl_rollout_samples_completed", ("1", "train"))] == 3
    assert g[("verl_rollout_samples_inflight", ("1", "train"))] == 0
    assert g[("verl_rollout_eta_seconds", ("1", "train"))] == 0
    assert done == [(1, "train", 3)]
    t.finish("train")  # the worker's generate_sequences returning afterwards: nothing more to emit
    assert len(done) == 1
    t.batch_started("train", 5, 2, None)  # the next step starts a new rollout
    assert _gauges(t)[("verl_rollout_samples_completed", ("1", "train"))] == 0


def test_update_tracker_epochs():
    u = UpdateTracker()
    u.begin("actor", expected=6, epochs=3)
    for _ in range(3):
        u.minibatch_done("actor")
    g = {(m.name, labels): v for m, labels, v in u.readings()}
    assert g[(sc.UPDATE_EPOCH.name, ("actor",))] == 2
    assert g[(sc.UPDATE_MINIBATCHES_COMPLETED.name, ("actor",))] == 3
    assert g[(sc.UPDATE_MINIBATCHES_EXPECTED.name, ("actor",))] == 6


def test_update_epoch_position_one_formula():
    """The gauge (epoch running now) and the bar (last finished mini-batch) read the same position()."""
    from verl_otel.telemetry.update import Update, position

    assert [position(i, 2, 3) for i in range(1, 7)] == [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)]
    assert position(9, 2, 3) == (3, 1)  # past the end (a batch larger than announced): capped at the last epoch
    upd = Update(expected=6, epochs=3)
    seen = []
    for _ in range(6):
        running = upd.epoch
        upd.completed += 1
        seen.append((running, upd.last_done()))
    # the epoch running before a mini-batch is the epoch that mini-batch is counted in once done
    assert seen == [(1, (1, 1)), (1, (1, 2)), (2, (2, 1)), (2, (2, 2)), (3, (3, 1)), (3, (3, 2))]
    assert upd.epoch == 3  # done: the last epoch, not 4
