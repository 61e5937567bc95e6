"""What runner processes tell their trainer: which span exporter failed, and the errors their agent logged."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from agentlightning.utils.otlp import LightningStoreOTLPExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from adapters.runner.concurrent_runner import AGENT_ERROR
from adapters.runner.processes import ErrorReport, ExportWatch, SpanExportAlarm

CREWAI_TELEMETRY = "https://telemetry.crewai.com:4319/v1/traces"


@pytest.fixture
def alarm() -> Iterator[SpanExportAlarm]:
    ExportWatch.install()
    found = SpanExportAlarm(worker_id=3).watch()
    yield found
    for name in ("agentops", "opentelemetry"):
        logging.getLogger(name).removeHandler(found)


def failing_export(exporter: OTLPSpanExporter) -> None:
    """One export that fails at once and logs it (an exporter that was shut down says so and gives up)."""
    exporter.shutdown()
    exporter.export([])


def test_a_frameworks_exporter_failing_is_named_and_not_blamed_for_lost_rewards(
    alarm: SpanExportAlarm, capsys: pytest.CaptureFixture[str]
) -> None:
    failing_export(OTLPSpanExporter(endpoint=CREWAI_TELEMETRY))
    line = capsys.readouterr().err.strip()
    assert line.startswith("agl-tinker runner 3: a span exporter other than Agent-lightning's failed (1x; ")
    assert f"OTLPSpanExporter to {CREWAI_TELEMETRY}" in line
    assert "logger opentelemetry.exporter.otlp.proto.http.trace_exporter" in line
    assert "do not reach the trainer" not in line


def test_agent_lightnings_export_to_the_store_failing_says_the_rewards_are_lost(
    alarm: SpanExportAlarm, capsys: pytest.CaptureFixture[str]
) -> None:
    exporter = LightningStoreOTLPExporter()
    exporter.enable_store_otlp("http://127.0.0.1:4747/v1/traces", "ro-1", "at-1")
    failing_export(exporter)
    line = capsys.readouterr().err.strip()
    assert line.startswith("agl-tinker runner 3: span export to the store failed (1x; ")
    assert "LightningStoreOTLPExporter to http://127.0.0.1:4747/v1/traces" in line
    assert line.endswith("the rewards and spans of its rollouts do not reach the trainer")


def test_a_failure_logged_outside_any_export_names_its_logger_and_blames_nothing(
    alarm: SpanExportAlarm, capsys: pytest.CaptureFixture[str]
) -> None:
    ExportWatch._local.export = None  # this thread ran no exporter
    logging.getLogger("opentelemetry.sdk.trace.export").error("Exception while exporting Span batch.")
    line = capsys.readouterr().err.strip()
    assert "(1x; logger opentelemetry.sdk.trace.export)" in line and "other than Agent-lightning's" in line


def test_the_error_report_sends_each_distinct_error_once_with_its_exception() -> None:
    pipe = io.StringIO()
    report = ErrorReport(pipe)
    log = logging.getLogger("some_framework")
    log.addHandler(report)
    try:
        for _ in range(2):
            try:
                raise ValueError("the tool server is down")
            except ValueError:
                log.exception("tool call failed")
        log.warning("a warning is not an error")
        log.warning("rollout ro-1: span 'tool' ended with an error", extra={AGENT_ERROR: True})
    finally:
        log.removeHandler(report)
    assert pipe.getvalue().splitlines() == [
        "tool call failed: ValueError: the tool server is down",
        "rollout ro-1: span 'tool' ended with an error",
    ]


def test_the_error_report_on_the_root_logger_prints_what_python_printed_before_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    saved, root.handlers = root.handlers, []  # a runner's root logger has none (pytest's capture aside)
    ErrorReport(io.StringIO()).watch()  # on the root logger: gone when its handlers are restored
    handled = logging.getLogger("framework_with_a_handler")
    own = logging.StreamHandler(io.StringIO())
    handled.addHandler(own)
    try:
        logging.getLogger("bare_framework").warning("printed by the last resort")
        handled.warning("printed by its own handler only")
    finally:
        root.handlers = saved
        handled.removeHandler(own)
    assert capsys.readouterr().err == "printed by the last resort\n"
