"""A real Prometheus server (Debian's `prometheus` 2.42) for tests: scrapes the run's file_sd file every
second, exemplar storage on, on 127.0.0.1; PromQL through its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from otlp_receiver import free_port


def available() -> bool:
    return shutil.which("prometheus") is not None and shutil.which("promtool") is not None


class PromServer:
    def __init__(self, workdir: Path, file_sd: Path, rule_files: list[Path] | None = None) -> None:
        self.workdir = Path(workdir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files or []],
            "scrape_configs": [{
                "job_name": "verl",
                "file_sd_configs": [{"files": [str(file_sd)], "refresh_interval": "1s"}],
            }],
        }
        self.config_path = self.workdir / "prometheus.yml"
        self.config_path.write_text(json.dumps(config))  # JSON is valid YAML
        self.proc: subprocess.Popen[bytes] | None = None
        self.at: float | None = None  # default evaluation time of queries (None: now)

    def start(self) -> "PromServer":
        self.log = open(self.workdir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={self.config_path}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--enable-feature=exemplar-storage",
             "--storage.tsdb.retention.time=1d"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"prometheus did not start: {(self.workdir / 'prometheus.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None
            self.log.close()

    def api(self, path: str, **params: Any) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as err:
            body = json.loads(err.read())
        if body.get("status") != "success":
            raise ValueError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr}
        at = self.at if at is None else at
        if at is not None:
            params["time"] = at
        return self.api("query", **params)["result"]

    def scalar_by(self, expr: str, label: str | None = None) -> dict[Any, float]:
        """{label value (or the sorted label items): value} of an instant query."""
        out = {}
        for row in self.query(expr):
            key = tuple(sorted(row["metric"].items())) if label is None else row["metric"].get(label)
            out[key] = float(row["value"][1])
        return out

    def targets(self) -> list[dict[str, Any]]:
        return self.api("targets")["activeTargets"]

    def __enter__(self) -> "PromServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
