"""The seed's rank-0 worker lines and actor bar labels: the engine strategy, VERL_PROGRESS_LOG_INTERVAL."""

from types import SimpleNamespace

import pytest

from verl_otel import runtime, trackers
from verl_otel.hooks import update


@pytest.fixture
def progress(monkeypatch):
    monkeypatch.setenv("VERL_PROGRESS_LOG", "1")
    monkeypatch.setenv("VERL_PROGRESS_LOG_INTERVAL", "2")
    runtime.reset_for_tests()  # new trackers: its [VERL_PROGRESS] settings read from these, no calls counted
    yield trackers.current().progress
    runtime.reset_for_tests()


def _worker(rank, strategy):
    return SimpleNamespace(rank=rank, config=SimpleNamespace(actor=SimpleNamespace(strategy=strategy)))


def test_rank0_lines_every_interval_with_the_strategy_label(progress, capsys):
    for _ in range(2):
        with update._rank0_lines("update_actor", "actor", _worker(0, "megatron"), object()):
            pass
        with update._rank0_lines("update_actor", "actor", _worker(1, "megatron"), object()):
            pass  # not rank 0: nothing
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0] == "[VERL_PROGRESS][actor=megatron][rank=0] update_actor start"
    assert lines[1].startswith("[VERL_PROGRESS][actor=megatron][rank=0] update_actor done: ")


def test_engine_strategy_wins_and_fsdp_is_dp():
    worker = SimpleNamespace(engine_config=SimpleNamespace(strategy="fsdp2"), config=SimpleNamespace())
    assert update._strategy(worker, "critic") == "dp"
    assert update._strategy(_worker(0, "megatron"), "actor") == "megatron"


def test_no_lines_when_the_call_fails(progress, capsys):
    progress._calls["update_actor"] = 1  # the next call is selected
    with pytest.raises(RuntimeError), update._rank0_lines("update_actor", "actor", _worker(0, "fsdp"), object()):
        raise RuntimeError("boom")
    assert capsys.readouterr().out.splitlines() == ["[VERL_PROGRESS][actor=dp][rank=0] update_actor start"]
