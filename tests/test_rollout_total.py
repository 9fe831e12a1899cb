"""The manager's total bar: the sum of the workers' counts for the dispatched step, asked through
``__ray_call__`` (here, stand-in actors answering from this process' tracker)."""

import time

import pytest

from verl_otel import config, trackers
from verl_otel.hooks.rollout import RayTotalBar


class _Call:
    def remote(self, fn, *args):
        return fn(None, *args)  # the actor runs worker_counts(actor, mode)


class _Worker:
    __ray_call__ = _Call()


@pytest.fixture
def ray_get(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "get", lambda refs, timeout=None: list(refs))


def _wait_for(capsys, text, timeout=5.0):
    out = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out += capsys.readouterr().out
        if text in out:
            return out
        time.sleep(0.02)
    return out


def test_total_over_workers_of_the_dispatched_step(ray_get, capsys):
    bar = RayTotalBar(config.load_progress({"VERL_PROGRESS_LOG": "1"}), poll_s=0.05)
    trackers.current().rollout.batch_started("train", 5, 4, None)
    tokens = [trackers.current().rollout.sample_started("train") for _ in range(4)]
    trackers.current().rollout.sample_finished("train", tokens[0], {}, None)
    bar.dispatched([_Worker(), _Worker()], "train", 5, 8)  # two workers, each with 1 of 4 done
    out = _wait_for(capsys, "2/8")
    assert "[VERL_PROGRESS][step=5][rollout_manager][train] [######------------------] 2/8 (25.0%)" in out
    for tok in tokens[1:]:
        trackers.current().rollout.sample_finished("train", tok, {}, None)
    out = _wait_for(capsys, "8/8")
    assert "8/8 (100.0%)" in out
    time.sleep(0.2)
    assert capsys.readouterr().out == "" and not bar._active, "a finished dispatch is not polled again"


def test_counts_of_another_step_do_not_count(ray_get, capsys):
    bar = RayTotalBar(config.load_progress({"VERL_PROGRESS_LOG": "1"}), poll_s=0.05)
    trackers.current().rollout.batch_started("validate", 3, 2, None)
    trackers.current().rollout.sample_finished(
        "validate", trackers.current().rollout.sample_started("validate"), {}, None
    )
    bar.dispatched([_Worker()], "validate", 4, 2)
    time.sleep(0.3)
    assert "rollout_manager" not in capsys.readouterr().out
    bar.returned("validate", 4)  # legacy: verl's call returned with every sample
    assert (
        "[VERL_PROGRESS][step=4][rollout_manager][validate] [########################] 2/2 (100.0%)"
        in capsys.readouterr().out
    )


def test_a_late_answer_is_asked_again(monkeypatch, capsys):
    import ray
    from ray.exceptions import GetTimeoutError

    answers = iter([GetTimeoutError("busy"), GetTimeoutError("busy")])

    def get(refs, timeout=None):
        err = next(answers, None)
        if err is not None:
            raise err
        return list(refs)

    monkeypatch.setattr(ray, "get", get)
    bar = RayTotalBar(config.load_progress({"VERL_PROGRESS_LOG": "1"}), poll_s=0.05)
    trackers.current().rollout.batch_started("train", 9, 1, None)
    trackers.current().rollout.sample_finished("train", trackers.current().rollout.sample_started("train"), {}, None)
    bar.dispatched([_Worker()], "train", 9, 1)
    assert "[VERL_PROGRESS][step=9][rollout_manager][train]" in _wait_for(capsys, "1/1")
