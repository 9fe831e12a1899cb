"""Alert rules: promtool checks them and runs their unit tests (each alert firing and not firing), thresholds
can be overridden, and a real Prometheus evaluates every rule on data without an error."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from helpers.prom import MetricsEndpoint, available
from helpers.synthetic_metrics import exposition

from verl_otel import semconv as sc
from verl_otel.dashboards import alerts, build

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy/prometheus/rules/verl-alerts.yml"
TESTS = ROOT / "deploy/prometheus/tests/verl-alerts.test.yml"
needs_promtool = pytest.mark.skipif(not available(), reason="promtool not installed (`make prometheus` installs it)")


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


@needs_promtool
def test_promtool_check_rules():
    proc = _promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(alerts.rules()) + len(alerts.records())} rules found" in proc.stdout, proc.stdout


@needs_promtool
def test_promtool_unit_tests_pass():
    proc = _promtool("test", "rules", str(TESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr


_RSS = sc.PROCESS_RESIDENT_MEMORY.name
_RUNNING = f'{sc.VLLM_REQUESTS_RUNNING}{{{sc.LABEL_PROCESS_ROLE}="{sc.PROCESS_ROLE_ROLLOUT_SERVER}"}}'


@needs_promtool
@pytest.mark.parametrize(
    ("alert", "part"),
    [
        ("VerlRunGone", f" unless on() {alerts.pipeline_unhealthy(alerts.Thresholds())}"),
        ("VerlStepStalled", f" unless on() {alerts.pipeline_unhealthy(alerts.Thresholds())}"),
        ("VerlGPUMemoryNearLimit", f" unless on() {sc.DCGM_FB_USED}"),
        ("VerlKLTooSmallRewardFlat", f"|{sc.KEY_KL_LOSS}"),
        ("VerlEngineNoTokens", f"(sum by ({alerts.ENGINE_BY}) ({_RUNNING}) > 0) and on({alerts.ENGINE_BY}) "),
        (
            "VerlMemoryLeak",  # the one-time jump fires without the both-halves guard
            f" and ({_RSS} - {_RSS} offset 1800s) > 33554432 and ({_RSS} offset 1800s - {_RSS} offset 1h) > 33554432",
        ),
    ],
)
def test_unit_tests_catch_a_rule_without_its_guard(tmp_path, alert, part):
    """The unit tests pin each guard: the committed rules with one guard cut out fail them."""
    doc = yaml.safe_load(RULES.read_text())
    rule = next(r for g in doc["groups"] for r in g["rules"] if r.get("alert") == alert)
    assert part in rule["expr"]
    rule["expr"] = rule["expr"].replace(part, "")
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / RULES.name).write_text(yaml.safe_dump(doc))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / TESTS.name).write_text(TESTS.read_text())
    proc = _promtool("test", "rules", str(tmp_path / "tests" / TESTS.name))
    assert proc.returncode == 1 and f"alertname: {alert}" in proc.stdout + proc.stderr


def test_every_alert_is_tested_firing_and_not_firing():
    doc = yaml.safe_load(TESTS.read_text())
    assert doc["rule_files"] == ["../rules/verl-alerts.yml"]
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in doc["tests"]:
        for ev in case.get("alert_rule_test", []):
            (firing if ev.get("exp_alerts") else quiet).add(ev["alertname"])
    names = {r.name for r in alerts.rules()}
    assert firing == names, f"never tested firing: {names - firing}"
    assert quiet == names, f"never tested quiet: {names - quiet}"


def test_rules_are_well_formed():
    doc = yaml.safe_load(RULES.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"] if "alert" in r]
    recorded = [r for g in doc["groups"] for r in g["rules"] if "record" in r]
    assert [r["record"] for r in recorded] == [r.name for r in alerts.records()] == list(sc.RECORDED)
    assert [r["alert"] for r in rules] == [r.name for r in alerts.rules()]
    assert len({r["alert"] for r in rules}) == len(rules)
    for r in rules:
        assert r["labels"]["severity"] in ("info", "warning", "critical"), r["alert"]
        assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]
        assert re.fullmatch(r"\d+[smh]", r["for"]), r["alert"]


def test_every_threshold_default_is_documented_in_the_readme():
    readme = (ROOT / "deploy/README.md").read_text()
    for name, value in vars(alerts.Thresholds()).items():
        assert f"| `{name}` | {value} |" in readme, name


@needs_promtool
def test_thresholds_can_be_overridden(tmp_path):
    out = tmp_path / "my-rules" / "verl-alerts.yml"
    assert (
        build.main(
            [
                "--threshold",
                "kl_max=0.2",
                "--threshold",
                "rollout_stall_window=30m",
                "--threshold",
                "gpu_memory_gb=141",
                "--rules-out",
                str(out),
            ]
        )
        == 0
    )
    rules = {r["alert"]: r for g in yaml.safe_load(out.read_text())["groups"] for r in g["rules"] if "alert" in r}
    assert rules["VerlKLBlowUp"]["expr"].endswith("> 0.2")
    assert "[30m]" in rules["VerlRolloutStalled"]["expr"] and "> 1800" in rules["VerlRolloutStalled"]["expr"]
    assert "> 133.95" in rules["VerlGPUMemoryNearLimit"]["expr"]
    assert "30m" in rules["VerlRolloutStalled"]["annotations"]["description"]
    proc = _promtool("check", "rules", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.read_text() != RULES.read_text() and build.main(["--check"]) == 0, "the committed rules keep defaults"


def test_pipeline_rules_name_the_stacks_jobs_and_collector_metrics():
    """The pipeline rules select prometheus.yml's job names, and the Collector's metric names as its :8888 reader
    is configured to write them (no `_total` or unit suffixes)."""
    prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    assert set(alerts.PIPELINE_JOBS) <= set(jobs) and "dcgm" not in alerts.PIPELINE_JOBS
    assert jobs[alerts.COLLECTOR_JOB]["static_configs"][0]["targets"] == ["otel-collector:8888"]
    collector = yaml.safe_load((ROOT / "deploy/otel-collector/config.yaml").read_text())
    reader = collector["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
    assert reader["without_type_suffix"] is True and reader["without_units"] is True
    for name in (sc.OTELCOL_SEND_FAILED_SPANS, sc.OTELCOL_ENQUEUE_FAILED_SPANS, sc.OTELCOL_REFUSED_POINTS):
        assert name.startswith("otelcol_") and not name.endswith("_total")
    groups = {
        g["name"]: [r["alert"] for r in g["rules"] if "alert" in r] for g in yaml.safe_load(RULES.read_text())["groups"]
    }
    assert set(groups) == {"verl-training", alerts.PIPELINE_GROUP, alerts.ENGINE_GROUP}
    assert {
        "VerlTelemetryTargetDown",
        "VerlCollectorExportFailing",
        "VerlCollectorQueueFull",
        "VerlTelemetryDropped",
    } <= set(groups[alerts.PIPELINE_GROUP])


def test_silence_rules_are_guarded_by_the_pipelines_health():
    guard = alerts.pipeline_unhealthy(alerts.Thresholds())
    for rule in alerts.rules():
        if rule.name in ("VerlRunGone", "VerlStepStalled"):
            assert rule.expr.endswith(f"unless on() {guard}"), rule.name


@pytest.mark.parametrize(
    "bad",
    [
        ["--threshold", "nope=1", "--rules-out", "x.yml"],
        ["--threshold", "rollout_stall_window=ten", "--rules-out", "x.yml"],
        ["--threshold", "kl_max=0.2"],
    ],
)
def test_bad_threshold_overrides_are_refused(bad, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        build.main(bad)
    assert exc.value.code == 2
    assert not (tmp_path / "x.yml").exists()


def test_every_rule_evaluates_on_data_in_real_prometheus(prom_factory):
    """Every rule expression, on two runs behind one instance, evaluates without error (a healthy synthetic run:
    rules may be empty, but must not fail)."""
    with MetricsEndpoint(exposition()) as endpoint:
        prom = prom_factory(
            config={
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES)],
                "scrape_configs": [{"job_name": "verl", "static_configs": [{"targets": [endpoint.address]}]}],
            }
        )
        prom.wait_for('up{job="verl"} == 1')
        for rule in [*alerts.rules(), *alerts.records()]:
            prom.query(rule.expr)  # raises ValueError with Prometheus' error
        deadline = time.monotonic() + 15
        while True:  # the rule manager's own evaluations: health "ok" once each rule ran without an error
            loaded = {r["name"]: r for g in prom.api("rules")["groups"] for r in g["rules"]}
            if all(r["health"] == "ok" for r in loaded.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert set(loaded) == {r.name for r in alerts.rules()} | {r.name for r in alerts.records()}
        assert {n: r.get("lastError") for n, r in loaded.items() if r["health"] != "ok"} == {}


def test_each_health_check_is_one_declaration():
    """A health check's alert rules and `top`'s line come from one declaration (dashboards/health.py): its rules
    are in the rules file once each, and a threshold moves both the rule and top's verdict."""
    from verl_otel.dashboards import health
    from verl_otel.live.health_table import signals
    from verl_otel.live.run_view import History, RunView

    names = [r.name for r in alerts.rules()]
    declared = [r.name for c in health.CHECKS for r in c.alerts(alerts.DEFAULTS)]
    assert len(declared) == len(set(declared)) >= len(health.CHECKS) and set(declared) <= set(names)
    assert all(names.count(n) == 1 for n in declared)
    view = RunView(metrics={sc.KEY_PPO_KL: 0.3})
    for kl_max, verdict in ((0.1, "tripped"), (0.5, "ok")):
        t = alerts.Thresholds.with_overrides([f"kl_max={kl_max}"])
        [rule] = health.KL_BLOW_UP.alerts(t)
        assert rule.expr.endswith(f"> {kl_max:g}") and [r for r in alerts.rules(t) if r.name == rule.name] == [rule]
        kl = {s.name: s for s in signals(view, History(), t)}[health.KL_BLOW_UP.name]
        assert kl.verdict == verdict, kl
