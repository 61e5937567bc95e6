"""The runner environment probe run for real: this interpreter as a runner environment, agents that load or not."""

from __future__ import annotations

import sys

import pytest
from returns.result import Failure, Success

from adapters.runner_env import check_runner_python

pytestmark = pytest.mark.slow


def test_this_environment_probes_clean_and_reports_a_litagents_trained_agents() -> None:
    result = check_runner_python(sys.executable, "tests.integration.agents:TaskRewardAgent", stock_runner=False)
    assert isinstance(result, Success), result
    assert result.unwrap().trained_agents == "writer"


def test_a_litagent_class_that_needs_arguments_is_refused_in_one_line_naming_them() -> None:
    result = check_runner_python(sys.executable, "tests.integration.agents:ConfiguredAgent", stock_runner=False)
    assert isinstance(result, Failure)
    assert "is a LitAgent class whose __init__ needs model_name: point agent= at a module-level instance" in (
        result.failure()
    )
