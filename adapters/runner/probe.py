"""What a runner environment has, reported by the environment itself (``python -m adapters.runner.probe AGENT``).

Runs under the interpreter a run's runners will use (``runner_python``): it reads the versions that
decide whether runners work there (Python, Agent-lightning, OpenTelemetry), loads the agent exactly
as a runner would, and prints one line ``agl-tinker-probe: {json}`` last on stdout, whatever the
agent's import printed before it. ``adapters.runner.env_check`` starts it and judges the report.
"""

from __future__ import annotations

import json
import platform
import sys
from importlib import metadata
from typing import Any

from adapters.runner.protocol import RUNNER_PROTOCOL

PROBE_PREFIX = "agl-tinker-probe: "


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def probe(agent_reference: str) -> dict[str, Any]:
    """The environment's versions, and the agent's load error (or its ``trained_agents``)."""
    report: dict[str, Any] = {
        "python": platform.python_version(),
        "protocol": RUNNER_PROTOCOL,
        "agentlightning": _version("agentlightning"),
        "opentelemetry_sdk": _version("opentelemetry-sdk"),
        "agent_error": None,
        "trained_agents": None,
    }
    if report["agentlightning"] is None:
        return report
    try:
        from adapters.runner.processes import load_agent

        agent = load_agent(agent_reference)
    except Exception as error:  # the whole point is to report it, whatever it is
        message = str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"
        report["agent_error"] = " ".join(message.split())
    else:
        trained = getattr(agent, "trained_agents", None)
        report["trained_agents"] = trained if isinstance(trained, str) else None
    return report


if __name__ == "__main__":
    result = probe(sys.argv[1])
    sys.stdout.flush()
    print(PROBE_PREFIX + json.dumps(result), flush=True)
