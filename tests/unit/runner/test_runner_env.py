"""The runner environment check: what each probe report means for a run (``adapters.runner.env_check``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from returns.result import Failure

from adapters.runner.env_check import RunnerEnvironment, _judge, check_runner_python
from adapters.runner.protocol import RUNNER_PROTOCOL

GOOD = RunnerEnvironment(
    python="3.11.9",
    protocol=RUNNER_PROTOCOL,
    agentlightning="0.3.0",
    opentelemetry_sdk="1.44.0",
    agent_error=None,
    trained_agents=None,
)


def judged(stock: bool = False, **changes: object) -> str | None:
    result = _judge("env", GOOD.model_copy(update=changes), stock_runner=stock)
    return result.failure() if isinstance(result, Failure) else None


def test_a_good_environment_passes_with_either_runner() -> None:
    assert judged() is None
    assert judged(stock=True) is None


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"python": "3.9.18"}, "Python 3.9.18; runners need Python 3.10-3.13"),
        ({"python": "3.14.0"}, "Python 3.14.0"),
        ({"protocol": RUNNER_PROTOCOL + 1}, "another version of this project"),
        ({"agentlightning": None}, "agentlightning is not installed"),
        ({"agentlightning": "1.0.2"}, "agentlightning 1.0.2; runners need the v0.x API"),
        ({"agent_error": "cannot load agent 'm:a': boom"}, "env: cannot load agent 'm:a': boom"),
    ],
)
def test_each_problem_is_one_line_naming_the_environment(changes: dict[str, object], says: str) -> None:
    message = judged(**changes)
    assert message is not None and says in message and message.startswith("env")
    assert "\n" not in message


def test_opentelemetry_1_45_fails_only_the_stock_runner_whose_exporter_loses_spans() -> None:
    assert judged(opentelemetry_sdk="1.45.2") is None  # the concurrent runner hands spans to the store itself
    message = judged(stock=True, opentelemetry_sdk="1.45.2")
    assert message is not None and "OpenTelemetry 1.45.2" in message and "'opentelemetry-sdk<1.45'" in message
    assert judged(stock=True, opentelemetry_sdk="1.44.0") is None


def test_a_missing_interpreter_is_named_with_the_way_to_build_one(tmp_path: Path) -> None:
    result = check_runner_python(str(tmp_path / "bin" / "python"), "m:a", stock_runner=False)
    assert isinstance(result, Failure)
    assert "no such interpreter" in result.failure() and "scripts/agent-env.sh" in result.failure()
