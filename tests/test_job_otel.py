"""The driver's OTEL_* variables reach only the processes verl-otel instruments (issue 38 item 6): ``ray.init``
carries them inside VERL_OTEL_JOB_OTEL, a local cluster's raylet starts without them, and a process applies
them when its runtime is made. Another SDK in the job (RL-Insight's hub actor) keeps its own sampler, headers
and switch; the real run with RL-Insight on is tests/test_e2e_async.py."""

from __future__ import annotations

import json
import os

from helpers.procs import clean_env, run_py

from verl_otel import _env
from verl_otel import semconv as sc
from verl_otel.hooks.ray_env import init_wrapper, job_env

OURS = {
    "OTEL_EXPORTER_OTLP_HEADERS": "x-collector-token=ours",
    "OTEL_TRACES_SAMPLER": "always_off",
    "OTEL_SDK_DISABLED": "true",
}


def test_otel_variables_travel_under_our_name_only(monkeypatch):
    for key, val in OURS.items():
        monkeypatch.setenv(key, val)
    env = job_env()
    assert not [k for k in env if k.startswith("OTEL_")], env
    assert json.loads(env[sc.ENV_JOB_OTEL]) == OURS
    assert _env.JOB_OTEL == sc.ENV_JOB_OTEL  # the start-up parser's copy


def test_ray_init_starts_ray_without_them_and_gives_them_back(monkeypatch):
    for key, val in OURS.items():
        monkeypatch.setenv(key, val)
    seen: dict[str, object] = {}

    def ray_init(**kwargs: object) -> str:  # what a local cluster's raylet inherits: this environment, now
        seen["otel"] = {k: v for k, v in os.environ.items() if k.startswith("OTEL_")}
        seen["env_vars"] = kwargs["runtime_env"]["env_vars"]  # type: ignore[index]
        return "context"

    made: list[dict[str, str]] = []  # the driver's runtime is made before they leave (read with its settings)
    monkeypatch.setattr("verl_otel.trackers.current", lambda: made.append(dict(os.environ)))
    monkeypatch.setattr("verl_otel.hooks.ray_env._discover", lambda: None)
    monkeypatch.setattr("verl_otel.hooks.ray_env._note_ends", lambda: None)
    assert init_wrapper(ray_init, None, (), {}) == "context"
    assert seen["otel"] == {}
    assert len(made) == 1 and {k: made[0][k] for k in OURS} == OURS
    assert json.loads(seen["env_vars"][sc.ENV_JOB_OTEL]) == OURS  # type: ignore[index]
    assert {k: os.environ[k] for k in OURS} == OURS  # the driver keeps its own


def test_an_instrumented_process_applies_them_its_own_values_win(tmp_path):
    carried = json.dumps({"OTEL_SERVICE_NAME": "carried", "OTEL_EXPORTER_OTLP_HEADERS": "a=1", "NOT_OTEL": "x"})
    code = (
        "import os; from verl_otel import runtime; runtime.current(); "
        "print(os.environ.get('OTEL_SERVICE_NAME'), os.environ.get('OTEL_EXPORTER_OTLP_HEADERS'), "
        "os.environ.get('NOT_OTEL'))"
    )
    env = clean_env(VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp_path), OTEL_SERVICE_NAME="own")
    env[sc.ENV_JOB_OTEL] = carried
    proc = run_py(["-c", code], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["own", "a=1", "None"]


def test_a_process_it_does_not_instrument_never_sees_them(tmp_path):
    """The start-up hook runs in every process of the venv (RL-Insight's hub actor's too): it reads the carried
    endpoint to decide, and leaves the environment as it was."""
    code = "import os; import verl_otel._autoload; print(os.environ.get('OTEL_EXPORTER_OTLP_HEADERS'))"
    env = clean_env()
    env[sc.ENV_JOB_OTEL] = json.dumps({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", **OURS})
    proc = run_py(["-c", code], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["None"]


def test_an_unreadable_carrier_is_nothing():
    for raw in ("", "{", "[1]", '{"OTEL_A": 1}', '{"PATH": "/x"}'):
        assert _env.job_otel({sc.ENV_JOB_OTEL: raw}) == {}, raw
