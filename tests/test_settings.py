"""Total configuration: every VERL_OTEL_*, VERL_PROGRESS_* and OTEL_* variable, with any string, gives its
value or one line naming the variable and the default used, on the code path a worker process runs
(sanitize, load, make the runtime, open a span, wire a role)."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_otel import config, runtime

_ALL = sorted({*config.OWN_VARIABLES, *config.OTEL_VARIABLES})
_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        ["inf", "-inf", "1e999", "nan", "0", "-1", "99999999999", "1", "true", "maybe", " ", "a=b,c", "%zz=1"]
    ),
)


_ENDPOINTS = tuple(k for k in _ALL if k.endswith("_ENDPOINT"))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(_ALL), _text, min_size=1, max_size=6))
def test_any_value_gives_a_value_or_a_line_naming_it(env):
    env = {k: v.replace("\x00", "") for k, v in env.items()}
    loaded = config.load(dict(env), report=False)
    checked = dict(env)
    problems = config.sanitize_otel_env(checked)
    for line in [*problems, *loaded.problems]:
        name = line.split("=", 1)[0]
        assert name in env and "using" in line, line
    for name, raw in env.items():  # a value that was not taken is named
        if name in config.OTEL_VARIABLES and name not in checked and raw.strip():
            assert any(line.startswith(name + "=") for line in problems), name
    assert loaded.max_text >= 0 and loaded.sample_spans >= 0 and loaded.shutdown_timeout_s >= 0

    # the worker's path: the runtime made from this environment opens and exports a span (local only:
    # endpoints and the data directory are fixed so nothing leaves the machine or the test's folder)
    with pytest.MonkeyPatch.context() as mp:
        for key in list(os.environ):
            if key.startswith(("VERL_OTEL_", "OTEL_", "VERL_PROGRESS_", "VERL_ROLLOUT_PROGRESS_")):
                mp.delenv(key)
        for key, val in env.items():
            if key not in _ENDPOINTS and key != "VERL_OTEL_DIR":
                mp.setenv(key, val)
        mp.setenv("VERL_OTEL_DIR", _DIR)
        try:
            runtime.reset_for_tests()
            rt = runtime.current()
            span = rt.tracer.start_span("probe")
            span.end()
            config.load_progress()
            rt.flush_wait(2.0)
        finally:
            runtime.reset_for_tests()


_DIR = tempfile.mkdtemp(prefix="verl-otel-settings-")
