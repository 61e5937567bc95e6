"""The runner environment probe run for real: this interpreter as a runner environment, agents that load or not."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from returns.result import Failure, Success

from adapters.runner.env_check import check_runner_python
from tests.support.agent_envs import agent_env_or_skip
from tests.support.runs import ROOT, batch_lines, example_overrides

RUN_HANG_S = 600.0
"""Hang-only bound on a probe plus a two-batch run whose runners start in another environment."""

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


def otel_145_python() -> str:
    """A runner environment pinning OpenTelemetry 1.45 beside scripts/runner-requirements.txt (built once, cached)."""
    env = agent_env_or_skip(ROOT / "tests" / "support" / "envs" / "otel-1.45.txt")
    return str(env.python)


def test_an_env_pinning_opentelemetry_1_45_builds_with_the_runner_requirements() -> None:
    """The runner requirements cap nothing the default runner does not need: such a pin resolves, the runner
    part imports there (the build checks it) and its scripts run from where the build renamed it."""
    python = otel_145_python()
    version = subprocess.run(
        [python, "-c", "from importlib.metadata import version; print(version('opentelemetry-sdk'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    pip = subprocess.run([str(Path(python).parent / "pip"), "--version"], capture_output=True, text=True, check=True)
    hooked = subprocess.run(
        [python, "-c", "import sys; print('_agl_tinker_pdeathsig' in sys.modules)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip

    assert version.startswith("1.45."), version
    assert pip.stdout.startswith("pip ")
    assert hooked == "True", "every interpreter of the environment arms its forks to die with it"


async def test_with_opentelemetry_1_45_the_concurrent_runner_trains_its_rewards_and_the_stock_one_is_refused(
    tmp_path: Path, tiny_model: Path
) -> None:
    """The default runner hands its spans to the store itself, so ``agl.emit_reward`` arrives with any
    OpenTelemetry; the stock runner's exporter loses every span from 1.45 on, so such a run stops before it starts,
    naming the environment and the fix."""
    from app.config import load_config
    from app.launch import LaunchError, train

    python = otel_145_python()
    overrides = [*example_overrides(tmp_path, tiny_model, "hello", "hello"), f"runner_python={python}"]
    cfg = load_config(None, overrides).unwrap()

    summary = await asyncio.wait_for(train(cfg), RUN_HANG_S)

    assert (summary.start_batch, summary.end_batch) == (0, 2)
    lines = batch_lines(tmp_path / "run")
    assert [m["rollouts/n_succeeded"] for m in lines] == [4.0, 4.0]
    assert [m["rollouts/n_without_reward"] for m in lines] == [0.0, 0.0]  # every emit_reward arrived

    stock = load_config(None, [*overrides, "trajectory_source=client", f"log_path={tmp_path / 'stock'}"]).unwrap()
    with pytest.raises(LaunchError) as refused:
        await asyncio.wait_for(train(stock), RUN_HANG_S)
    assert str(refused.value).startswith(f"runner environment {python}: OpenTelemetry 1.45.")
    assert "'opentelemetry-sdk<1.45'" in str(refused.value)
    assert not (tmp_path / "stock" / "metrics.jsonl").exists()
