"""What `verl-otel demo` shows by default: our lines, the seed's progress lines and verl's per-step line;
the rest of verl's output (Ray's thread warnings, engine import warnings) only in demo.log or with --verbose."""

from __future__ import annotations

import pytest

from verl_otel.demo.runner import ours


@pytest.mark.parametrize(
    "line,shown",
    [
        ("(TaskRunner pid=12) [verl-otel] step 2/5 took 3.1s, slowest phase update_actor 1.2s (39%)", True),
        ("(AgentLoopWorker pid=7) [VERL_PROGRESS][step=2][worker=0][train] [####----] 4/8 (50.0%)", True),
        ("(TaskRunner pid=12) step:2 - actor/pg_loss:0.1 - critic/score/mean:0.0", True),
        ("[verl-otel demo] verl (v1, 5 steps) exited with 0 after 90s", True),
        ("(raylet) [2026-11-23 16:01:11,446 W 1 2] thread_pool.cc:60: ...", False),
        ("UserWarning: megatron engine is not available: ModuleNotFoundError(\"No module named 'megatron'\")", False),
        ("Training Progress:  40%|####      | 2/5", False),
    ],
)
def test_default_output_filter(line, shown):
    assert ours(line) is shown
