"""Total configuration: every VERL_OTEL_*, VERL_PROGRESS_* and OTEL_* variable, with any string, gives its
value or one line naming the variable and the default used, on the code path a worker process runs
(sanitize, load, make the runtime, open a span, wire a role)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_otel import config, runtime
from verl_otel import semconv as sc

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


# -- a loopback OTLP endpoint forwarded to another host ------------------------------------------------------------
def test_ray_init_tells_every_process_the_drivers_host(monkeypatch):
    from verl_otel.hooks.ray_env import job_env, merge_runtime_env

    monkeypatch.setenv(sc.ENV_DRIVER_HOST, "inherited-from-elsewhere")
    env = job_env()
    assert env[sc.ENV_DRIVER_HOST] == socket.gethostname(), "the process calling ray.init is the driver"
    merged = merge_runtime_env({"env_vars": {sc.ENV_DRIVER_HOST: "users"}}, env)
    assert merged["env_vars"][sc.ENV_DRIVER_HOST] == "users", "the user's runtime_env wins"


@pytest.mark.parametrize(
    ("endpoints", "named"),
    [
        (("http://127.0.0.1:4317", None), "http://127.0.0.1:4317"),
        ((None, "localhost:4317"), "localhost:4317"),  # the metrics endpoint alone
        (("http://[::1]:4318", "http://[::1]:4318"), "http://[::1]:4318"),
        (("http://127.0.0.2:4317", None), "http://127.0.0.2:4317"),
        (("http://head-node:4317", None), None),  # routable: reaches the head from every node
        (("http://10.0.0.1:4317", None), None),
        ((None, None), None),  # no endpoint: the embedded default
    ],
)
def test_a_loopback_endpoint_on_another_host_than_the_drivers_is_named(endpoints, named):
    line = config.loopback_elsewhere("node-a", endpoints, "/data/run", here="node-b")
    if named is None:
        assert line is None
        return
    assert line and f"{named} is loopback on host node-b (the driver runs on node-a)" in line
    assert "/data/run/unsent/" in line and "deploy/otel-collector/agent.yaml" in line
    # on the driver's host, or with no driver known (no ray.init forwarded it: one host), nothing to say
    assert config.loopback_elsewhere("node-b", endpoints, "/data/run", here="node-b") is None
    assert config.loopback_elsewhere("", endpoints, "/data/run", here="node-b") is None


def test_a_worker_on_another_host_prints_the_line_once_at_start(tmp_path):
    """A process as Ray starts it on another node: the forwarded variables, a driver host that is not this one;
    its runtime reads the settings and says it in one line (once, however often the settings are read)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_OTEL_", "OTEL_", "VERL_PROGRESS_"))}
    env |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        sc.ENV_DRIVER_HOST: "the-head-node",
        sc.ENV_DIR: str(tmp_path),
        "VERL_OTEL_SHUTDOWN_TIMEOUT": "0.5",
    }
    code = "from verl_otel import config, runtime; runtime.current(); config.load(); config.load()"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if "is loopback on host" in line]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("[verl-otel] "), lines
    assert f"on host {socket.gethostname()} (the driver runs on the-head-node)" in lines[0]
    assert str(tmp_path / "unsent") in lines[0]
