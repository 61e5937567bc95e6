"""Whether an agent's own Python environment can run this project's runners, checked once before a run.

``runner_python`` points the run's runner processes at another interpreter (an environment whose
framework cannot share the trainer's dependencies). One short probe there (``adapters.runner.probe``)
reports its versions and loads the agent; this module turns the report into a frozen model, or into
one line that names the environment, what is wrong and the fix:

- the interpreter exists and has this project's runner part (``scripts/agent-env.sh`` installs it);
- Python 3.10-3.13, Agent-lightning 0.3.x (the v0.x API the runners use);
- OpenTelemetry below 1.45 where Agent-lightning's OTLP exporter carries the spans (the stock
  ``LitAgentRunner`` of ``trajectory_source=client``): from 1.45 on every span it exports is lost,
  rewards included, while the rollout still succeeds. The concurrent runner hands its spans to the
  store itself and does not use that exporter, so it works with any version;
- the agent loads there (``adapters.runner.processes.load_agent``: an agent, or a LitAgent class made
  with no arguments).
"""

from __future__ import annotations

import json
import os
import subprocess

from pydantic import BaseModel, ConfigDict, ValidationError
from returns.result import Failure, Result, Success

from adapters.runner.probe import PROBE_PREFIX
from adapters.runner.protocol import RUNNER_PROTOCOL

PROBE_TIMEOUT_S = 300.0
"""Only catches a hang: the probe imports Agent-lightning and the agent (seconds; more on a loaded machine)."""
SUPPORTED_PYTHON = ((3, 10), (3, 13))
EXPORTER_BROKEN_FROM = (1, 45)
BUILD_HINT = "bash scripts/agent-env.sh path/to/requirements.txt builds one"


class RunnerEnvironment(BaseModel):
    """What the probe found in a runner environment."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    python: str
    protocol: int
    agentlightning: str | None
    opentelemetry_sdk: str | None
    agent_error: str | None
    trained_agents: str | None


def _release(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_runner_python(
    python: str, agent: str, *, stock_runner: bool, timeout_s: float = PROBE_TIMEOUT_S
) -> Result[RunnerEnvironment, str]:
    """Probe ``python`` for the runners of ``agent``: the environment, or one line saying what to fix."""
    where = f"runner environment {python}"
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        return Failure(f"{where}: no such interpreter ({BUILD_HINT})")
    try:
        done = subprocess.run(
            [python, "-m", "adapters.runner.probe", agent],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TINKER_TELEMETRY": "0"},
        )
    except subprocess.TimeoutExpired:
        return Failure(f"{where}: its probe did not answer in {timeout_s:.0f} s (importing the agent hangs?)")
    except OSError as error:
        return Failure(f"{where}: cannot run it ({error})")
    lines = [line for line in done.stdout.splitlines() if line.startswith(PROBE_PREFIX)]
    if done.returncode != 0 or not lines:
        if "No module named 'adapters" in done.stderr or "No module named adapters" in done.stderr:
            return Failure(
                f"{where}: this project's runner part is not installed there ({BUILD_HINT}; or pip install "
                "--no-deps <this project> and -r scripts/runner-requirements.txt into it)"
            )
        last = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        return Failure(f"{where}: its probe failed: {last[0]}")
    try:
        found = RunnerEnvironment.model_validate(json.loads(lines[-1][len(PROBE_PREFIX) :]))
    except (ValueError, ValidationError) as error:
        return Failure(f"{where}: unreadable probe report ({' '.join(str(error).split())[:200]})")
    return _judge(where, found, stock_runner=stock_runner)


def _judge(where: str, found: RunnerEnvironment, *, stock_runner: bool) -> Result[RunnerEnvironment, str]:
    python = _release(found.python)[:2]
    low, high = SUPPORTED_PYTHON
    if not low <= python <= high:
        return Failure(f"{where}: Python {found.python}; runners need Python {low[0]}.{low[1]}-{high[0]}.{high[1]}")
    if found.protocol != RUNNER_PROTOCOL:
        return Failure(f"{where}: its runner part is from another version of this project ({BUILD_HINT} anew)")
    if found.agentlightning is None:
        return Failure(f"{where}: agentlightning is not installed (pip install 'agentlightning>=0.3,<0.4' there)")
    if _release(found.agentlightning)[:2] != (0, 3):
        return Failure(
            f"{where}: agentlightning {found.agentlightning}; runners need the v0.x API, 0.3.x "
            "(pip install 'agentlightning>=0.3,<0.4' there)"
        )
    otel = found.opentelemetry_sdk
    if stock_runner and otel is not None and _release(otel) >= EXPORTER_BROKEN_FROM:
        return Failure(
            f"{where}: OpenTelemetry {otel} loses every span Agent-lightning's exporter sends, rewards included "
            "(trajectory_source=client runs the stock runner, which uses it): pip install "
            "'opentelemetry-api<1.45' 'opentelemetry-sdk<1.45' 'opentelemetry-exporter-otlp-proto-http<1.45' there"
        )
    if found.agent_error is not None:
        return Failure(f"{where}: {found.agent_error}")
    return Success(found)
