"""Prometheus and Alertmanager in the stack, in the real tools: promtool on both configs and the rules they
load, the scrape targets against compose's services, a real Prometheus agent on the pull path, amtool on
the Alertmanager config, and a firing rule delivered through a real Alertmanager to a webhook."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from helpers.deploy import ROOT, UI_BIND, compose, mounts, repo_yaml
from helpers.otlp_receiver import free_port
from helpers.prom import MetricsEndpoint, available

from verl_otel import semconv as sc

PROM_DIR = ROOT / "deploy/prometheus"
needs_promtool = pytest.mark.skipif(not available(), reason="promtool not installed (`make prometheus` installs it)")


# -- Prometheus -----------------------------------------------------------------------------------------------------
@needs_promtool
@pytest.mark.parametrize("config", ["prometheus.yml", "prometheus-pull.yml"])
def test_promtool_check_config(config):
    proc = subprocess.run(
        ["promtool", "check", "config", "--syntax-only", str(PROM_DIR / config)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_promtool_check_config_with_the_rules_it_loads(tmp_path):
    """Without --syntax-only: the rule files the server config names (as mounted) are loaded and checked too."""
    cfg = repo_yaml("deploy/prometheus/prometheus.yml")
    assert cfg["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    cfg["rule_files"] = [str(PROM_DIR / "rules" / "*.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(
        ["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


def test_prometheus_scrapes_the_services_compose_defines():
    services = compose()["services"]
    for job in repo_yaml("deploy/prometheus/prometheus.yml")["scrape_configs"]:
        for target in (t for c in job.get("static_configs", []) for t in c["targets"]):
            assert target.split(":")[0] in services, f"job {job['job_name']}: no service {target}"
    pull = repo_yaml("deploy/prometheus/prometheus-pull.yml")
    sd_file = pull["scrape_configs"][0]["file_sd_configs"][0]["files"][0]
    assert Path(sd_file).name == sc.PROM_TARGETS_FILE and str(Path(sd_file).parent) in mounts(
        services["prometheus-pull"]
    )
    assert pull["remote_write"][0]["url"] == "http://127.0.0.1:9090/api/v1/write"
    assert f"{UI_BIND}:9090:9090" in services["prometheus"]["ports"]
    assert pull["remote_write"][0]["send_exemplars"] is True


def test_pull_path_agent_remote_writes_the_runs_metrics(prom_factory, tmp_path):
    """prometheus-pull.yml in a real Prometheus agent: it discovers a process through the run's file_sd file
    (the format verl-otel writes) and remote-writes its samples into a server started like the compose one."""
    server = prom_factory(
        config={"global": {"scrape_interval": "1m"}, "scrape_configs": []}, args=["--web.enable-remote-write-receiver"]
    )
    metrics = f"# TYPE {sc.TRAINING_STEP.name} gauge\n{sc.TRAINING_STEP.name} 7\n"
    with MetricsEndpoint(metrics) as endpoint:
        sd_file = tmp_path / sc.PROM_TARGETS_FILE
        sd_file.write_text(
            json.dumps(
                [
                    {
                        "targets": [endpoint.address],
                        "labels": {
                            sc.LABEL_PROJECT: "p",
                            sc.LABEL_EXPERIMENT: "e",
                            sc.LABEL_PROCESS_ROLE: sc.PROCESS_ROLE_TRAINER,
                            "__verl_otel_pid": "1",
                        },
                    }
                ]
            )
        )
        cfg = repo_yaml("deploy/prometheus/prometheus-pull.yml")
        cfg["global"]["scrape_interval"] = "1s"
        cfg["scrape_configs"][0]["file_sd_configs"][0]["files"] = [str(sd_file)]
        cfg["remote_write"][0]["url"] = f"{server.url}/api/v1/write"
        cfg["remote_write"][0]["queue_config"] = {"batch_send_deadline": "1s"}
        prom_factory(config=cfg, agent=True)
        rows = server.wait_for(f'{sc.TRAINING_STEP.name}{{job="verl"}}')
    labels = rows[0]["metric"]
    assert rows[0]["value"][1] == "7"
    assert labels[sc.LABEL_PROJECT] == "p" and labels[sc.LABEL_EXPERIMENT] == "e"
    assert labels[sc.LABEL_PROCESS_ROLE] == sc.PROCESS_ROLE_TRAINER and "__verl_otel_pid" not in labels


# -- Alertmanager --------------------------------------------------------------------------------------------------
AM_CONFIG = ROOT / "deploy/alertmanager/alertmanager.yml"


def test_prometheus_sends_alerts_to_the_compose_alertmanager():
    services = compose()["services"]
    am = services["alertmanager"]
    config = next(a.split("=", 1)[1] for a in am["command"] if a.startswith("--config.file="))
    assert mounts(am)[config] == "./deploy/alertmanager/alertmanager.yml"
    targets = [
        t
        for a in repo_yaml("deploy/prometheus/prometheus.yml")["alerting"]["alertmanagers"]
        for c in a["static_configs"]
        for t in c["targets"]
    ]
    assert targets == ["alertmanager:9093"] and f"{UI_BIND}:9093:9093" in am["ports"]
    receivers = yaml.safe_load(AM_CONFIG.read_text())["receivers"]
    url_files = [w["url_file"] for r in receivers for w in r.get("webhook_configs", [])]
    assert url_files and all(Path(f).parent.as_posix() in mounts(am) for f in url_files), (
        "the receiver's URL file lies in a mounted folder"
    )


def _amtool_version() -> tuple[int, ...]:
    out = subprocess.run(["amtool", "--version"], capture_output=True, text=True).stdout
    return tuple(int(x) for x in re.search(r"version (\d+)\.(\d+)\.(\d+)", out).groups())


def _alertmanager_config_for(webhook_url: str | None, tmp_path: Path) -> Path:
    """The committed config; url_file (Alertmanager >= 0.26, newer than Debian's 0.25 amtool here) becomes the
    equivalent inline url when the local tools predate it (the only key that differs)."""
    doc = yaml.safe_load(AM_CONFIG.read_text())
    for receiver in doc["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            if webhook_url is not None:
                url_file = tmp_path / "webhook_url"
                url_file.write_text(webhook_url + "\n")
                hook["url_file"] = str(url_file)
            if _amtool_version() < (0, 26, 0):
                hook["url"] = webhook_url or "http://127.0.0.1:1/unset"
                del hook["url_file"]
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool not installed (`make prometheus` installs it)")
def test_amtool_checks_the_alertmanager_config(tmp_path):
    proc = subprocess.run(
        ["amtool", "check-config", str(_alertmanager_config_for(None, tmp_path))], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


class _Webhook:
    """An HTTP receiver on 127.0.0.1 recording the JSON bodies POSTed to it (Alertmanager's webhook)."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.skipif(
    shutil.which("prometheus-alertmanager") is None,
    reason="Alertmanager not installed (`make prometheus` installs Debian's)",
)
def test_a_firing_rule_reaches_the_receiver(prom_factory, tmp_path):
    """prometheus.yml's `alerting:` and alertmanager.yml's route and receiver, in a real Prometheus and a real
    Alertmanager: a firing rule arrives as a webhook POST (the route's waits shortened, nothing else changed)."""
    hook = _Webhook()
    am_config = _alertmanager_config_for(hook.url, tmp_path)
    doc = yaml.safe_load(am_config.read_text())
    doc["route"]["group_wait"] = "1s"
    am_config.write_text(yaml.safe_dump(doc))
    am_port = free_port()
    with open(tmp_path / "alertmanager.log", "wb") as log:  # the child writes to its own copy
        am = subprocess.Popen(
            [
                "prometheus-alertmanager",
                f"--config.file={am_config}",
                f"--storage.path={tmp_path / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        rules = tmp_path / "rules.yml"
        rules.write_text(
            yaml.safe_dump(
                {
                    "groups": [
                        {
                            "name": "check",
                            "rules": [
                                {
                                    "alert": "VerlDeliveryCheck",
                                    "expr": "vector(1)",
                                    "labels": {"severity": "warning", sc.LABEL_PROJECT: "p", sc.LABEL_EXPERIMENT: "e"},
                                    "annotations": {"summary": "delivery check"},
                                }
                            ],
                        }
                    ]
                }
            )
        )
        cfg = repo_yaml("deploy/prometheus/prometheus.yml")
        cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] = [f"127.0.0.1:{am_port}"]
        # resend-delay: an alert sent before the Alertmanager was discovered would wait a minute otherwise
        prom_factory(
            config={
                "global": {"evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "alerting": cfg["alerting"],
                "scrape_configs": [],
            },
            args=["--rules.alert.resend-delay=1s"],
        )
        deadline = time.monotonic() + 60
        while not hook.bodies and time.monotonic() < deadline and am.poll() is None:
            time.sleep(0.5)
    finally:
        am.terminate()
        am.wait(10)
        hook.close()
    assert hook.bodies, (tmp_path / "alertmanager.log").read_text()[-2000:]
    body = hook.bodies[0]
    assert body["receiver"] == doc["route"]["receiver"] and body["status"] == "firing"
    assert body["alerts"][0]["labels"]["alertname"] == "VerlDeliveryCheck"
    assert body["groupLabels"] == {"alertname": "VerlDeliveryCheck", sc.LABEL_PROJECT: "p", sc.LABEL_EXPERIMENT: "e"}
