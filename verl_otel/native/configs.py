"""The command line of each part of the native stack: the very files of deploy/, with only addresses and paths
overridden. The Collector and Jaeger take ``--set`` (their yaml provider); Prometheus and Alertmanager have no
such flag, so they read a copy of deploy/'s file in the state directory in which only the compose hostnames
(otel-collector:8889, alertmanager:9093, ...) and the container paths are replaced."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from verl_otel.native.ports import Binds, Ports

#: binary names, searched in the given paths, ROOT/.stack-bin (`make stack-bin`) and PATH; Debian names
#: Alertmanager prometheus-alertmanager
BINARIES = {
    "collector": ("otelcol-verl",),
    "jaeger": ("jaeger",),
    "prometheus": ("prometheus",),
    "alertmanager": ("alertmanager", "prometheus-alertmanager"),
}
HOW_TO_GET = {
    "collector": "`make stack-bin` builds it",
    "jaeger": "`make stack-bin` builds it",
    "prometheus": "`make prometheus` or `apt-get install prometheus`",
    "alertmanager": "`make prometheus` or `apt-get install prometheus-alertmanager`",
}
#: the Collector's own-metrics reader of deploy/otel-collector/config.yaml, its address left out (a list
#: cannot be reached by --set key by key); tests/test_stack_native.py fails when the two differ
COLLECTOR_READER = {"without_units": True, "without_type_suffix": True, "without_scope_info": True}


class ConfigError(RuntimeError):
    """A part cannot be configured (binary missing, deploy file changed): the message says what to do."""


@dataclass(frozen=True)
class Part:
    name: str
    argv: list[str]
    health_url: str
    env: dict[str, str] = field(default_factory=dict)  # added to this process' environment


def find_binary(name: str, given: Path | None, root: Path) -> Path:
    if given is not None:
        if given.is_file():
            return given.absolute()
        raise ConfigError(f"{name}: {given} is not a file")
    for exe in BINARIES[name]:
        local = root / ".stack-bin" / exe
        if local.is_file():
            return local
        found = shutil.which(exe)
        if found:
            return Path(found)
    raise ConfigError(
        f"{name}: no {' or '.join(BINARIES[name])} on PATH or in {root / '.stack-bin'}; "
        f"{HOW_TO_GET[name]}, or give its path (--{name} PATH)"
    )


def reader(port: int, options: dict[str, bool] | None = None, host: str = "127.0.0.1") -> str:
    """A Collector's own-metrics reader (a list: set whole with --set)."""
    return json.dumps([{"pull": {"exporter": {"prometheus": {"host": host, "port": port, **(options or {})}}}}])


def collector(exe: Path, root: Path, state: Path, ports: Ports, binds: Binds) -> Part:
    queue = state / "collector-queue"
    queue.mkdir(parents=True, exist_ok=True)
    sets = {
        "receivers.otlp.protocols.grpc.endpoint": f"{binds.otlp}:{ports.otlp_grpc}",
        "receivers.otlp.protocols.http.endpoint": f"{binds.otlp}:{ports.otlp_http}",
        "exporters.otlp/jaeger.endpoint": f"127.0.0.1:{ports.jaeger_otlp_grpc}",
        "exporters.prometheus.endpoint": f"127.0.0.1:{ports.collector_metrics}",
        "extensions.health_check.endpoint": f"127.0.0.1:{ports.collector_health}",
        "extensions.file_storage.directory": str(queue),
        "service.telemetry.metrics.readers": reader(ports.collector_telemetry, COLLECTOR_READER),
    }
    argv = [str(exe), f"--config={root / 'deploy/otel-collector/config.yaml'}"]
    argv += [f"--set={k}={v}" for k, v in sets.items()]
    return Part("collector", argv, f"http://127.0.0.1:{ports.collector_health}/")


def jaeger(exe: Path, root: Path, state: Path, ports: Ports, binds: Binds) -> Part:
    badger = state / "jaeger"
    for sub in ("keys", "values"):
        (badger / sub).mkdir(parents=True, exist_ok=True)
    sets = {
        "receivers.otlp.protocols.grpc.endpoint": f"127.0.0.1:{ports.jaeger_otlp_grpc}",
        "receivers.otlp.protocols.http.endpoint": f"127.0.0.1:{ports.jaeger_otlp_http}",
        "extensions.jaeger_query.http.endpoint": f"{binds.ui}:{ports.jaeger_ui}",
        "extensions.jaeger_query.grpc.endpoint": f"127.0.0.1:{ports.jaeger_grpc}",
        "extensions.healthcheckv2.http.endpoint": f"127.0.0.1:{ports.jaeger_health}",
        "extensions.jaeger_storage.backends.badger.badger.directories.keys": str(badger / "keys"),
        "extensions.jaeger_storage.backends.badger.badger.directories.values": str(badger / "values"),
        # Jaeger's own metrics default to localhost:8888, the Collector's port
        "service.telemetry.metrics.readers": reader(ports.jaeger_telemetry),
    }
    argv = [str(exe), f"--config={root / 'deploy/jaeger/config.yaml'}"]
    argv += [f"--set={k}={v}" for k, v in sets.items()]
    return Part("jaeger", argv, f"http://127.0.0.1:{ports.jaeger_health}/status")


def _replace(text: str, pairs: dict[str, str], source: Path) -> str:
    for old, new in pairs.items():
        if old not in text:
            raise ConfigError(f"{source} no longer mentions {old!r}: the native stack must learn its new address")
        text = text.replace(old, new)
    return text


def prometheus(exe: Path, root: Path, state: Path, ports: Ports, binds: Binds, rules: Path | None) -> Part:
    source = root / "deploy/prometheus/prometheus.yml"
    rules_dir = (rules or root / "deploy/prometheus/rules").absolute()
    text = _replace(
        source.read_text(),
        {
            "otel-collector:8889": f"127.0.0.1:{ports.collector_metrics}",
            "otel-collector:8888": f"127.0.0.1:{ports.collector_telemetry}",
            "alertmanager:9093": f"127.0.0.1:{ports.alertmanager}",
            "dcgm-exporter:9400": "127.0.0.1:9400",  # NVIDIA's DCGM exporter's own port, if it runs here
            "/etc/prometheus/rules/": f"{rules_dir}/",
        },
        source,
    )
    config = state / "prometheus.yml"
    config.write_text(f"# {source} with only addresses and paths replaced (verl-otel stack up --native)\n{text}")
    argv = [
        str(exe),
        f"--config.file={config}",
        f"--storage.tsdb.path={state / 'prometheus'}",
        f"--web.listen-address={binds.ui}:{ports.prometheus}",
        # the flags of docker-compose.yml's prometheus service
        "--storage.tsdb.retention.time=30d",
        "--enable-feature=exemplar-storage",
        "--web.enable-lifecycle",
        "--web.enable-remote-write-receiver",
    ]
    return Part("prometheus", argv, f"http://127.0.0.1:{ports.prometheus}/-/ready")


def _version(exe: Path) -> tuple[int, ...]:
    try:
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ()
    found = re.search(r"version (\d+)\.(\d+)\.(\d+)", out.stdout + out.stderr)
    return tuple(int(x) for x in found.groups()) if found else ()


def alertmanager(exe: Path, root: Path, state: Path, ports: Ports, binds: Binds) -> Part:
    source = root / "deploy/alertmanager/alertmanager.yml"
    secrets = root / "deploy/alertmanager/secrets"
    text = _replace(source.read_text(), {"/etc/alertmanager/secrets/": f"{secrets}/"}, source)
    if _version(exe) < (0, 26, 0):
        # url_file came in 0.26 (Debian 12 ships 0.25): the URL is read once, here; without the file the
        # webhook goes to a closed port and the alerts are still listed by the API and amtool
        url_file = secrets / "webhook_url"
        url = url_file.read_text().strip() if url_file.is_file() else "http://127.0.0.1:9/no-webhook-configured"
        text = text.replace(f"url_file: {url_file}", f"url: {json.dumps(url)}")
    config = state / "alertmanager.yml"
    config.write_text(f"# {source} with only paths replaced (verl-otel stack up --native)\n{text}")
    argv = [
        str(exe),
        f"--config.file={config}",
        f"--storage.path={state / 'alertmanager'}",
        f"--web.listen-address={binds.ui}:{ports.alertmanager}",
        f"--web.external-url=http://localhost:{ports.alertmanager}",
        "--cluster.listen-address=",  # no gossip port (0.0.0.0:9094 by default)
    ]
    return Part("alertmanager", argv, f"http://127.0.0.1:{ports.alertmanager}/-/ready")
