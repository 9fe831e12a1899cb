"""``verl-otel push``: send the spans a run could not deliver before its shutdown budget ran out
(``$VERL_OTEL_DIR/unsent/*.jsonl``, OTLP/JSON) to an OTLP endpoint, oldest line first. A file whose every
line was delivered (or refused for good) is deleted; one the endpoint stopped answering in is rewritten
with the lines still to send, so running push again goes on where it stopped. Run it after the run ended
(a running process may still append to its file)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from verl_otel import semconv as sc
from verl_otel.cli.argtypes import positive_int
from verl_otel.export.otlp_json import request_bytes
from verl_otel.export.otlp_send import OK, RETRY, Outcome, Sender, make_sender
from verl_otel.export.spool import span_count

PROG = "verl-otel push"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("push", help="send the spans a run left in $VERL_OTEL_DIR/unsent/", description=__doc__)
    p.add_argument("--dir", default=None, help=f"the run's data directory (default: ${sc.ENV_DIR}, ./verl-otel-data)")
    p.add_argument(
        "--endpoint",
        default=None,
        help="OTLP endpoint (default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT, "
        "http://localhost:4317)",
    )
    p.add_argument(
        "--protocol",
        choices=("grpc", "http/protobuf"),
        default=None,
        help="default: OTEL_EXPORTER_OTLP_PROTOCOL, else grpc",
    )
    p.add_argument(
        "--wait", type=positive_int, default=30, metavar="S", help="give up after S s without an answer (default: 30)"
    )
    return p


def _send(sender: Sender, data: bytes, wait_s: float) -> Outcome:
    """Send one request, retrying while the endpoint says "later", at most ``wait_s``."""
    deadline, delay = time.monotonic() + wait_s, 0.25
    while True:
        outcome = sender.send(data)
        if outcome.kind != RETRY or time.monotonic() + delay > deadline:
            return outcome
        time.sleep(min(outcome.retry_after_s or delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 4.0)


def _rewrite(path: Path, lines: list[bytes]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"".join(lines))
    os.replace(tmp, path)


def run(args: argparse.Namespace) -> int:
    data_dir = Path(args.dir or os.environ.get(sc.ENV_DIR) or "./verl-otel-data")
    files = sorted((data_dir / sc.UNSENT_DIR).glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    if not files:
        print(f"nothing waits in {data_dir / sc.UNSENT_DIR}")
        return 0
    specific = args.endpoint is None and bool(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip())
    endpoint = (
        args.endpoint
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or "http://localhost:4317"
    )
    protocol = args.protocol or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip() or "grpc"
    specific = specific or endpoint.rstrip("/").endswith("/v1/traces")
    sender = make_sender(endpoint, protocol, 10.0, specific)
    sent = refused = malformed = 0
    try:
        for path in files:
            lines = path.read_bytes().splitlines(keepends=True)
            for i, line in enumerate(lines):
                if not line.strip():
                    continue
                try:
                    data = request_bytes(line)
                    spans = span_count(data)
                except Exception:  # noqa: BLE001 - a damaged line (cut by a crash): skipped, said below
                    malformed += 1
                    continue
                outcome = _send(sender, data, float(args.wait))
                if outcome.kind == RETRY:
                    _rewrite(path, lines[i:])
                    print(
                        f"{PROG}: {sender.endpoint} does not answer ({outcome.reason}: {outcome.detail[:200]}); "
                        f"sent {sent} spans, the rest still wait in {path.parent} (run push again)",
                        file=sys.stderr,
                    )
                    return 1
                if outcome.kind == OK:
                    sent += spans - outcome.rejected
                    refused += outcome.rejected
                else:
                    refused += spans
                    print(f"{PROG}: refused ({outcome.reason}: {outcome.detail[:200]})", file=sys.stderr)
            path.unlink()
    finally:
        sender.close()
    print(
        f"sent {sent} spans from {len(files)} file{'s' * (len(files) != 1)} to {sender.endpoint}"
        + (f"; {refused} refused by it" if refused else "")
        + (f"; {malformed} damaged lines skipped" if malformed else "")
    )
    return 0 if not refused and not malformed else 1
