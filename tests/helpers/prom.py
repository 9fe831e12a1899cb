"""A real Prometheus server (Debian's `prometheus` 2.42) for tests, on 127.0.0.1 with exemplar storage on;
PromQL through its HTTP API.

    PromServer(workdir, file_sd)                     # scrapes the run's file_sd file every second
    PromServer(workdir, config={...}, args=[...])    # any config dict and extra flags
    PromServer(workdir, config={...}, agent=True)    # agent mode (scrape + remote write, no queries)

Tests ask for the ``prom_factory`` fixture (tests/conftest.py), which starts servers on demand and stops them
afterwards. ``MetricsEndpoint`` serves fixed exposition text as a scrape target.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from helpers.otlp_receiver import free_port


def available() -> bool:
    return shutil.which("prometheus") is not None and shutil.which("promtool") is not None


def file_sd_config(file_sd: Path, rule_files: list[Path] | None = None) -> dict[str, Any]:
    """One job `verl` reading ``file_sd``, scraped and evaluated every second."""
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rule_files or []],
        "scrape_configs": [
            {
                "job_name": "verl",
                "file_sd_configs": [{"files": [str(file_sd)], "refresh_interval": "1s"}],
            }
        ],
    }


class PromClient:
    """PromQL through a Prometheus server's HTTP API at ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.at: float | None = None  # default evaluation time of queries (None: now)

    def api(self, path: str, **params: Any) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
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


def evaluate_every_expression(prom: PromClient) -> tuple[list[str], int]:
    """Every dashboard query, template variable and alert expression on ``prom`` (a parse or evaluation error
    raises): the places that returned nothing without a reason to be empty on a CPU run, and how many returned
    data."""
    from verl_otel.dashboards import all_expressions, concrete

    empty_without_reason, with_data = [], 0
    for where, expr, cpu_empty in all_expressions():
        if prom.query(concrete(expr)):
            with_data += 1
        elif cpu_empty is None:
            empty_without_reason.append(where)
    return empty_without_reason, with_data


class PromServer(PromClient):
    def __init__(
        self,
        workdir: Path,
        file_sd: Path | None = None,
        rule_files: list[Path] | None = None,
        *,
        config: dict[str, Any] | None = None,
        args: list[str] | tuple[str, ...] = (),
        agent: bool = False,
    ) -> None:
        if (config is None) == (file_sd is None):
            raise ValueError("give either file_sd or config")
        self.workdir = Path(workdir)
        self.port = free_port()
        super().__init__(f"http://127.0.0.1:{self.port}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config = config if config is not None else file_sd_config(file_sd, rule_files)  # type: ignore[arg-type]
        self.config_path = self.workdir / "prometheus.yml"
        self.config_path.write_text(json.dumps(self.config))  # JSON is valid YAML
        self.args = list(args)
        self.agent = agent
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        data = self.workdir / "data"
        storage = (
            ["--enable-feature=agent", f"--storage.agent.path={data}"]
            if self.agent
            else [
                f"--storage.tsdb.path={data}",
                "--enable-feature=exemplar-storage",
                "--storage.tsdb.retention.time=1d",
            ]
        )
        return [
            "prometheus",
            f"--config.file={self.config_path}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            *storage,
            *self.args,
        ]

    def start(self) -> PromServer:
        with open(self.workdir / "prometheus.log", "wb") as log:  # the child writes to its own copy
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus did not start: {(self.workdir / 'prometheus.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None

    def wait_for(self, expr: str, timeout: float = 30) -> list[dict[str, Any]]:
        """Poll ``expr`` until it returns something (raises TimeoutError with the log tail otherwise)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = self.query(expr)
            if rows:
                return rows
            time.sleep(0.5)
        raise TimeoutError(f"{expr} stayed empty: {(self.workdir / 'prometheus.log').read_text()[-1500:]}")

    def __enter__(self) -> PromServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class MetricsEndpoint:
    """A /metrics endpoint on 127.0.0.1 serving Prometheus text exposition (a stand-in scrape target)."""

    def __init__(self, text: str | Callable[[], str]) -> None:
        """``text``: the exposition, or a function giving each scrape's (counters that move make rate() non-zero)."""
        render = text if callable(text) else (lambda: text)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> MetricsEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
