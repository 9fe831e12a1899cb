"""RL-Insight beside verl-otel in one real run (issue 38 item 6): the rl-insight package's own server (its real
FastAPI app, ``python -m rl_insight.server.http_api``, without the Prometheus, Tempo and Grafana it would download)
tells the run's hub actor where to export, and that OTLP endpoint is a receiver of ours, which keeps each request's
headers. The hub's ``/metrics`` (it registers its address with the server, which writes its file_sd targets file)
is scraped while the run is up (``probe``)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from helpers.otlp_receiver import OtlpReceiver, free_port

#: what the run's environment sets for verl-otel's own Collector: verl-otel's processes apply it, RL-Insight's hub
#: must not export with it (the hub's spans would carry the header, its resource the attribute)
OURS = {"OTEL_EXPORTER_OTLP_HEADERS": "x-verl-otel-collector=ours", "OTEL_RESOURCE_ATTRIBUTES": "verl_otel.test=ours"}


class RLInsight:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.rx = OtlpReceiver()
        self.port = free_port()
        self.hub_port = free_port()
        self.hub_metrics = ""  # the last scrape of the hub's /metrics that held one of verl's gauges
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        return {"RL_INSIGHT_SERVER_URL": f"http://127.0.0.1:{self.port}", **OURS}

    @property
    def overrides(self) -> list[str]:
        return [
            "trainer.logger=[console,rl_insight]",
            "actor_rollout_ref.rollout.disable_log_stats=false",  # verl refuses rl_insight without the servers' stats
            f"+trainer.rl_insight.prometheus.metrics_report_port={self.hub_port}",
        ]

    @property
    def targets_file(self) -> Path:
        return self.root / "data" / "targets" / "prometheus-targets.yml"

    def start(self) -> RLInsight:
        self.root.mkdir(parents=True, exist_ok=True)
        self.rx.start()
        config = {
            "server": {"port": self.port, "data_dir": str(self.root / "data")},
            "otel": {"otel_port": self.rx.http_port},
            "prometheus": {"prometheus_port": free_port()},  # none there: the server's reload fails, with a line
        }
        cfg = self.root / "config.yaml"
        cfg.write_text(yaml.safe_dump(config))
        log = open(self.root / "server.log", "wb")  # noqa: SIM115 - the server's, closed with it
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "rl_insight.server.http_api", "--config", str(cfg)], stdout=log, stderr=log
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2):
                    return self
            except OSError:
                if self._proc.poll() is not None:
                    break
                time.sleep(0.3)
        raise RuntimeError(f"RL-Insight's server did not start: {(self.root / 'server.log').read_text()[-2000:]}")

    def hub_targets(self) -> list[str]:
        """What the hub registered with the server (file_sd: [{targets: [...], labels: {...}}]; verl registers the
        rollout servers' addresses there too, under the rollout's name)."""
        try:
            groups = yaml.safe_load(self.targets_file.read_text()) or []
        except (OSError, yaml.YAMLError):
            return []
        hub = [g for g in groups if (g.get("labels") or {}).get("rl_insight_job") == "trainer_metrics"]
        return [t for g in hub for t in g.get("targets", [])]

    def probe(self, _out: Path) -> None:
        for target in self.hub_targets():
            try:
                with urllib.request.urlopen(f"http://{target}/metrics", timeout=2) as resp:
                    text = resp.read().decode()
            except OSError:
                continue
            if "rl_insight_monitor_" in text:
                self.hub_metrics = text

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self.rx.stop()
