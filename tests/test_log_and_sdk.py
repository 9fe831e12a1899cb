"""Conventions an OpenTelemetry user relies on: importing verl-otel adds no handler and changes no propagation
(a NullHandler only), yet our one-line warnings still show in verl's output by default, and go only where the
application says once it configured our logger; the SDK's private fields we read are where we read them."""

from __future__ import annotations

import tomllib

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from helpers.procs import ROOT, clean_env, run_py

import verl_otel
from verl_otel import semconv as sc
from verl_otel.export.sdk_private import span_queue

IMPORTED = """
import logging, verl_otel, verl_otel._log, verl_otel.runtime, verl_otel.hooks.targets
lg = logging.getLogger("verl_otel")
print("STATE", [type(h).__name__ for h in lg.handlers], lg.propagate, lg.level, logging.getLogger().handlers)
"""

IN_VERL = """
import logging, sys
import verl  # configures the root logger: WARNING, its own format (logging.basicConfig)
if sys.argv[1] == "app":
    mine = logging.StreamHandler(sys.stdout)
    mine.setFormatter(logging.Formatter("APP %(name)s %(levelname)s %(message)s"))
    logging.getLogger("verl_otel").addHandler(mine)
from verl_otel._log import logger, warn_once
warn_once("k", "the collector is away")
warn_once("k", "the collector is away")
logger.info("step 1/2 took 1.0s")
print("PROPAGATE", logger.propagate)
"""


def test_importing_configures_nothing(tmp_path):
    proc = run_py(["-c", IMPORTED], clean_env(), tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "STATE ['NullHandler'] True 0 []" in proc.stdout, proc.stdout


def test_our_lines_show_in_verls_output_by_default(tmp_path):
    proc = run_py(["-c", IN_VERL, "default"], clean_env(), tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert lines.count("[verl-otel] WARNING the collector is away") == 1, proc.stderr[-2000:]  # once, in our format
    assert "[verl-otel] INFO step 1/2 took 1.0s" in lines, proc.stderr[-2000:]  # INFO too, below verl's WARNING
    assert not [x for x in lines if x.startswith("WARNING:") and "collector" in x], "not twice (root's format)"


def test_an_application_handler_on_our_logger_gets_our_lines_alone(tmp_path):
    proc = run_py(["-c", IN_VERL, "app"], clean_env(), tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("APP verl_otel WARNING the collector is away") == 1, proc.stdout
    assert "PROPAGATE True" in proc.stdout  # its propagation, untouched
    assert "[verl-otel]" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("size", [2, 7])  # one span: below the batch size, so it waits in the queue
def test_the_sdks_private_queue_fields_are_where_we_read_them(size):
    """Fails when the SDK moves or renames them (export/sdk_private.py): the full queue's drops would go uncounted."""
    processor = BatchSpanProcessor(
        InMemorySpanExporter(), max_queue_size=size, max_export_batch_size=size, schedule_delay_millis=60_000
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    try:
        held = span_queue(processor)
        assert held is not None, "the SDK's BatchSpanProcessor keeps its queue elsewhere now"
        queue, limit = held
        assert limit == size and len(queue) == 0
        provider.get_tracer("t").start_span("s").end()
        assert len(queue) == 1  # the very queue the SDK fills
    finally:
        provider.shutdown()


def test_the_instrumentation_version_is_the_packages():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert sc.INSTRUMENTATION_VERSION == verl_otel.__version__ == version


@pytest.mark.parametrize(
    ("raw", "level"), [("debug", "DEBUG"), (" Warning ", "WARNING"), ("loud", "INFO"), ("", "INFO")]
)
def test_our_log_level_is_read_by_the_one_parser(raw, level):
    """_log.py reads VERL_OTEL_LOG_LEVEL through _env.py (before any settings exist); a value naming no level is
    INFO there, and config.load names it once."""
    from verl_otel import _env, config

    assert _env.LOG_LEVEL == sc.ENV_LOG_LEVEL
    assert _env.log_level({sc.ENV_LOG_LEVEL: raw}) == level
    problems = config.load({sc.ENV_LOG_LEVEL: raw}, report=False).problems
    assert any(sc.ENV_LOG_LEVEL in p for p in problems) == (level == "INFO" and raw.strip() not in ("", "info"))
