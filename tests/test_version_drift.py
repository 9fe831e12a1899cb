"""verl versions we were not built against: a verl built from git (``0.10.0.dev0``), a post or release
candidate, a module that moved, a function that was renamed. Each runs in a fresh process against a fake
verl on ``PYTHONPATH`` (a dist-info naming the version, and modules laid out as that build has them), with
Python's real import machinery and importlib.metadata; nothing of ours is replaced."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.procs import ROOT, clean_env, run_py

from verl_otel import semconv as sc
from verl_otel.hooks import coverage, registry
from verl_otel.hooks.registry import HookTarget
from verl_otel.hooks.targets import ALL_TARGETS, RAY_TARGETS

_MODULES = {
    "verl/utils/tracking.py": "class Tracking:\n    def log(self, data, step, backend=None):\n        pass\n\n\n"
    "class ValidationGenerationsLogger:\n    def log(self, *a, **k):\n        pass\n",
    "verl/utils/profiler/performance.py": "def _timer(name, timing_raw):\n    yield\n",
    # the legacy trainer's module moved one package down
    "verl/trainer/ppo/legacy/ray_trainer.py": "class RayPPOTrainer:\n    def fit(self):\n        pass\n",
    # the v1 trainer kept fit() and renamed _validate()
    "verl/trainer/ppo/v1/trainer_base.py": "class PPOTrainer:\n    def fit(self):\n        pass\n\n"
    "    def validate(self):\n        pass\n",
}


def fake_verl(root: Path, version: str) -> Path:
    """A verl ``version`` laid out as :data:`_MODULES`, importable from ``root``."""
    info = root / f"verl-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: verl\nVersion: {version}\n")
    for rel, code in _MODULES.items():
        path = root / rel
        for pkg in [p for p in path.relative_to(root).parents if p != Path(".")]:
            (root / pkg).mkdir(parents=True, exist_ok=True)
            (root / pkg / "__init__.py").touch()
        path.write_text(code)
    return root


HOOKED = (
    "import verl.utils.tracking as t; print('HOOKED' if hasattr(t.Tracking.__dict__['log'], '__wrapped__') else 'BARE')"
)


@pytest.mark.parametrize(
    "version,hooked",
    [
        ("0.10.0.dev0", True),
        ("0.10.0rc1", True),
        ("0.9.1.post1", True),
        ("0.9.1+g1234abc", True),
        ("0.7.0", False),  # below the declared floor: OTel's dependency check refuses, as it should
    ],
)
def test_instrument_on_dev_and_post_releases(tmp_path, version, hooked):
    fake = fake_verl(tmp_path / "site", version)
    code = f"import verl_otel; verl_otel.instrument(); {HOOKED}"
    proc = run_py(["-c", code], clean_env(PYTHONPATH=str(fake)), tmp_path)  # no variable: instrument() alone
    assert proc.returncode == 0, proc.stderr
    assert ("HOOKED" if hooked else "BARE") in proc.stdout, proc.stdout + proc.stderr


_WIRE = (
    "import verl.utils.tracking, verl.utils.profiler.performance, verl.trainer.ppo.v1.trainer_base; "
    "import verl.trainer.ppo.legacy.ray_trainer; "
    "from verl_otel import runtime; rt = runtime.current(); rt.wire('trainer'); rt.wire('trainer', key='again'); "
    f"{HOOKED}"
)


def _startup_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if re.search(r"\[verl-otel\] \w+ verl \S+: \d+/\d+ trainer hooks", ln)]


def test_startup_line_names_moved_renamed_and_missing(tmp_path):
    fake = fake_verl(tmp_path / "site", "0.10.0.dev0")
    env = clean_env(PYTHONPATH=str(fake), VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp_path / "data"))
    proc = run_py(["-c", _WIRE], env, tmp_path)  # activated by the environment, as in a user's run
    assert proc.returncode == 0, proc.stderr
    assert "HOOKED" in proc.stdout
    lines = _startup_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr  # one line for the role, however often it is wired
    text = lines[0]
    total = sum(coverage.process_role_of(t) == "trainer" for t in ALL_TARGETS)
    # hooked: _timer, Tracking.log, ValidationGenerationsLogger.log, PPOTrainer.fit
    assert text.startswith(f"[verl-otel] WARNING verl 0.10.0.dev0: 4/{total} trainer hooks"), text
    assert (
        "legacy trainer step traces, legacy validation spans, reward extra keys on the console "
        "(verl.trainer.ppo.ray_trainer not in verl 0.10.0.dev0: moved?)"
    ) in text, text
    assert (
        "v1 validation spans (PPOTrainer._validate not in verl.trainer.ppo.v1.trainer_base of verl "
        "0.10.0.dev0: renamed?)"
    ) in text, text
    assert "worker spans in the step trace (verl.single_controller.ray.base not in verl" in text, text
    assert "needs verl" not in text  # a dev build of the next release is in every range
    assert "Traceback" not in proc.stderr


def test_startup_line_names_version_skipped_targets(tmp_path):
    fake = fake_verl(tmp_path / "site", "0.8.0")
    env = clean_env(PYTHONPATH=str(fake), VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp_path / "data"))
    proc = run_py(["-c", _WIRE], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    (text,) = _startup_lines(proc.stderr)
    assert re.search(r"verl 0\.8\.0: 3/\d+ trainer hooks", text), text  # PPOTrainer.fit is skipped: v1 is 0.9.0+
    assert "v1 trainer step traces, v1 validation spans, " in text and "(needs verl >= 0.9.0)" in text, text


def test_startup_line_of_the_installed_verl(tmp_path):
    """The real verl 0.9.1: everything the trainer role imports is hooked, nothing is off."""
    code = (
        "import verl.trainer.ppo.ray_trainer, verl.trainer.ppo.v1.trainer_base, verl.utils.tracking; "
        "from verl_otel import runtime; runtime.current().wire('trainer')"
    )
    env = clean_env(VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp_path / "data"))
    proc = run_py(["-c", code], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    (text,) = _startup_lines(proc.stderr)
    assert re.search(r"\[verl-otel\] INFO verl 0\.9\.1: \d+/\d+ trainer hooks .*; off: none$", text), text


@pytest.mark.parametrize(
    "version,min_verl,max_verl,applies",
    [
        ("0.9.0.dev0", "0.9.0", None, True),  # git build before 0.9.0: may have it, resolution decides
        ("0.10.0.dev0", "0.0", "0.10.0", True),  # ... and may still have what 0.10.0 removed
        ("0.10.0rc1", "0.10.0", None, True),
        ("0.9.1.post1", "0.0", "0.9.1", False),  # a post release is after its release
        ("0.9.1+local", "0.9.2", None, False),
        ("0.8.0", "0.9.0", None, False),
        ("0.9.0", "0.9.0", None, True),
    ],
)
def test_version_guard_on_dev_and_post_releases(version, min_verl, max_verl, applies):
    target = HookTarget("verl.x", "A.f", "m:f", "f", min_verl=min_verl, max_verl=max_verl)
    assert registry._in_range(target, version) is applies


def test_every_target_has_a_process_role():
    assert [t.key for t in (*RAY_TARGETS, *ALL_TARGETS) if coverage.process_role_of(t) is None] == []


def test_module_exists_without_importing(tmp_path):
    assert coverage.module_exists("verl.trainer.ppo.ray_trainer")
    assert not coverage.module_exists("verl.trainer.ppo.no_such_module")
    assert not coverage.module_exists("verl.utils.tracking.not_a_package")
    assert not coverage.module_exists("no_such_top_level_package.x")
    # in a fresh process: the module and its packages are found on disk, none of them imported
    code = (
        "import sys; from verl_otel.hooks.coverage import module_exists; "
        "name = 'verl.experimental.fully_async_policy.fully_async_rollouter'; "
        "print(module_exists(name), sorted(m for m in sys.modules if m.startswith('verl.experimental')))"
    )
    proc = run_py(["-c", code], clean_env(), tmp_path)
    assert proc.returncode == 0 and proc.stdout.split() == ["True", "[]"], proc.stdout + proc.stderr


def test_readme_hook_counts_match_the_targets():
    """The per-version hook counts of the README and the install page are computed from the table, so they cannot
    go stale."""
    for page in ("README.md", "docs/getting-started/install.md"):
        text = (ROOT / page).read_text()
        for version in ("0.8.0", "0.9.0", "0.9.1"):
            n = sum(registry._in_range(t, version) for t in ALL_TARGETS)
            assert f"verl {version}: {n} of {len(ALL_TARGETS)}" in text, (page, version, n)


@pytest.mark.parametrize("version", ["0.8.0", "0.10.0.dev0"])
def test_demo_says_which_verl_it_needs_before_starting(tmp_path, version):
    """verl 0.8.0 has no verl.plugin: the demo says what it needs at once (it died on a bare
    ModuleNotFoundError inside verl's start-up); a git build whose verl.plugin moved away is told the same."""
    fake = fake_verl(tmp_path / "site", version)
    out = tmp_path / "out"
    proc = run_py(
        ["-m", "verl_otel.demo", "--steps", "1", "--out", str(out)],
        clean_env(PYTHONPATH=str(fake)),
        tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        f"the CPU demo needs verl >= 0.9.1 (its CPU platform plugs in through verl.plugin); this environment "
        f"has verl {version}" in proc.stderr
    ), proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists(), "nothing is built or started"


def test_demo_accepts_the_installed_verl():
    from verl_otel.demo.cli import verl_problem

    assert verl_problem() is None


def test_every_target_names_a_semconv_role():
    """hooks/targets.py writes each group's role out (it loads at every start-up, without semconv): each is one of
    semconv's PROCESS_ROLE_* values, so the start-up line and the resource name the same role."""
    roles = {v for k, v in vars(sc).items() if k.startswith("PROCESS_ROLE_")}
    assert {t.process_role for t in (*RAY_TARGETS, *ALL_TARGETS)} <= roles
