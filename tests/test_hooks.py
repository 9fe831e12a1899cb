"""Hook installation against the installed verl: uninstrument restores verl's own functions, a
missing target only warns (naming the verl version), and the .pth start-up hook activates
instrumentation from the environment alone."""

import sys

import pytest
import verl.utils.profiler.performance as perf
import verl.utils.tracking as tracking

from helpers.procs import clean_env, run_py

from verl_otel.hooks import registry
from verl_otel.hooks.registry import HookTarget
from verl_otel.hooks.targets import ALL_TARGETS


def _current(owner, name):
    return owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)


def test_uninstrument_restores_verl_functions():
    import verl.experimental.agent_loop.agent_loop as al
    import verl.trainer.ppo.v1.agent_loop_tq as tq

    originals = {
        "timer": perf._timer,
        "log": tracking.Tracking.__dict__["log"],
        "manager": al.AgentLoopManager.__dict__["generate_sequences"],
        "tq": tq.AgentLoopWorkerTQ.__ray_metadata__.modified_class.__dict__["generate_sequences"],
    }
    import verl_otel

    verl_otel.instrument()
    try:
        assert perf._timer is not originals["timer"] and perf._timer.__wrapped__ is originals["timer"]
        assert tracking.Tracking.__dict__["log"].__wrapped__ is originals["log"]
        assert al.AgentLoopManager.__dict__["generate_sequences"] is not originals["manager"]
        # every target whose module is loaded is hooked now; the others (fully_async) when imported
        loaded = {f"{t.module}.{t.attr}" for t in ALL_TARGETS if t.module in sys.modules}
        assert len(loaded) >= 20 and loaded <= set(registry.installed())
    finally:
        verl_otel.uninstrument()
    assert perf._timer is originals["timer"]
    assert tracking.Tracking.__dict__["log"] is originals["log"]
    assert al.AgentLoopManager.__dict__["generate_sequences"] is originals["manager"]
    assert tq.AgentLoopWorkerTQ.__ray_metadata__.modified_class.__dict__["generate_sequences"] is originals["tq"]
    assert registry.installed() == []


def test_missing_hook_target_is_named_on_the_startup_line(otel_log, monkeypatch):
    from verl_otel.hooks import coverage

    monkeypatch.setattr(registry, "_late", False)  # as before this process' first start-up line (another test's)

    target = HookTarget(
        "verl.utils.tracking",
        "Tracking.no_such_method_in_any_verl",
        lambda w, i, a, k: w(*a, **k),
        "an imaginary feature",
        process_role="trainer",
    )
    try:
        registry.install([target])
        text, bad = coverage.line("trainer")
    finally:
        registry.uninstall([target])
    assert (
        bad
        and (
            "an imaginary feature (Tracking.no_such_method_in_any_verl not in verl.utils.tracking of "
            "verl 0.9.1: renamed?)"
        )
        in text
    ), text
    assert otel_log.warnings() == [], "said once, on the role's line"


def test_hook_outside_version_range_is_skipped():
    target = HookTarget("verl.utils.tracking", "Tracking.log", lambda w, i, a, k: w(*a, **k), "x", min_verl="99.0")
    before = tracking.Tracking.__dict__["log"]
    registry.install([target])
    try:
        assert tracking.Tracking.__dict__["log"] is before
    finally:
        registry.uninstall([target])


@pytest.mark.parametrize(
    "env,active",
    [
        ({"VERL_OTEL_ENABLED": "1"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "VERL_OTEL_ENABLED": "0"}, False),
        ({"VERL_OTEL_ENABLED": "1", "OTEL_SDK_DISABLED": "true"}, False),
        # a Ray worker of a job whose driver set only an endpoint: it came in VERL_OTEL_JOB_OTEL
        ({"VERL_OTEL_JOB_OTEL": '{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}'}, True),
        ({}, False),
    ],
)
def test_activation_from_environment_alone(tmp_path, env, active):
    code = (
        "import verl.utils.profiler.performance as p; print('HOOKED' if hasattr(p._timer, '__wrapped__') else 'BARE')"
    )
    proc = run_py(["-c", code], clean_env(**env), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ("HOOKED" if active else "BARE") in proc.stdout


def test_ray_init_carries_settings_to_workers(monkeypatch, tmp_path):
    from verl_otel.hooks.ray_env import job_env, merge_runtime_env

    monkeypatch.setenv("VERL_OTEL_DIR", "rel-dir")
    monkeypatch.setenv("VERL_PROGRESS_LOG", "1")
    monkeypatch.chdir(tmp_path)
    env = job_env()
    assert env["VERL_OTEL_DIR"] == str(tmp_path / "rel-dir")
    merged = merge_runtime_env({"env_vars": {"VERL_OTEL_DIR": "user-choice"}, "pip": ["x"]}, env)
    assert merged["env_vars"]["VERL_OTEL_DIR"] == "user-choice"  # the user's value wins
    assert merged["env_vars"]["VERL_PROGRESS_LOG"] == "1"
    assert merged["pip"] == ["x"]


def test_a_failing_import_hook_does_not_fail_the_import(otel_log):
    """Our post-import finder runs hooks inside verl's import: one that raises is reported, the module loads."""
    import importlib
    import sys

    from verl_otel.hooks import import_hooks

    name = "json.tool"  # a stdlib module nothing else imports here
    sys.modules.pop(name, None)

    def boom(module):
        raise RuntimeError("hook bug")

    import_hooks.register(name, boom)
    try:
        module = importlib.import_module(name)
    finally:
        import_hooks._hooks.pop(name, None)
    assert module.__name__ == name
    assert any("cannot hook json.tool" in m and "hook bug" in m for m in otel_log.messages()), otel_log.messages()


async def _probe(self, x=1):
    return x + 1


def test_an_added_method_is_there_until_uninstall():
    """how="add": a method verl's class lacks (the reward workers' step-end flush), put on the class when
    its module is imported and taken off again; a name the class already has is left alone."""
    import asyncio

    from verl_otel.hooks import coverage

    added = HookTarget("verl.utils.tracking", "Tracking.verl_otel_probe", _probe, "probe", how="add")
    clash = HookTarget("verl.utils.tracking", "Tracking.log", _probe, "clash", how="add", process_role="trainer")
    before = tracking.Tracking.__dict__["log"]
    registry.install([added, clash])
    try:
        assert tracking.Tracking.verl_otel_probe is _probe
        assert asyncio.run(tracking.Tracking.__new__(tracking.Tracking).verl_otel_probe(2)) == 3
        assert tracking.Tracking.__dict__["log"] is before
        assert (
            "clash (cannot add Tracking.log in verl.utils.tracking of verl 0.9.1: no such class, or it has one)"
        ) in coverage.line("trainer")[0]
    finally:
        registry.uninstall([added, clash])
    assert "verl_otel_probe" not in tracking.Tracking.__dict__ and tracking.Tracking.__dict__["log"] is before
