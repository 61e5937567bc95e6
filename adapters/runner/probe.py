"""What a runner environment has, reported by the environment itself (``python -m adapters.runner.probe AGENT``).

Runs under the interpreter a run's runners will use (``runner_python``): it reads the versions that
decide whether runners work there (Python, Agent-lightning, OpenTelemetry), loads the agent exactly
as a runner would, and prints one line ``agl-tinker-probe: {json}`` last on stdout, whatever the
agent's import printed before it. ``adapters.runner.env_check`` starts it and judges the report.

``python -m adapters.runner.probe --imports AGENT`` is the quick one (a fraction of a second, nothing
imported): it reads the agent's module and reports the first package that the module imports
unconditionally at its top and that this environment lacks (a trainer-only package, say), so
``agl-tinker train`` can refuse such a run before importing anything heavy (``app.faces.preflight``).
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import json
import os
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


def _find(dotted: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of module ``dotted``, its parents searched, not imported (their ``__init__`` may be heavy)."""
    parts = dotted.split(".")
    try:
        spec = importlib.machinery.PathFinder.find_spec(parts[0], sys.path) or importlib.util.find_spec(parts[0])
        for depth in range(1, len(parts)):
            locations = None if spec is None else spec.submodule_search_locations
            if locations is None:
                return None
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: depth + 1]), list(locations))
    except (ImportError, ValueError):
        return None
    return spec


def _unconditional_imports(source: str) -> list[str]:
    """Top-level packages a module imports in its body's own statements (not under ``try``/``if``/a function)."""
    names: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            names.extend(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module.split(".")[0])
    return names


def missing_import(agent_reference: str) -> str | None:
    """The first module the agent needs that this environment lacks: its own module, or a package that module
    imports unconditionally at its top; None when nothing is missing (or the module cannot be read here)."""
    module_name = agent_reference.partition(":")[0]
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as ``load_agent``
    spec = _find(module_name)
    if spec is None:
        return module_name
    if not (spec.origin and spec.origin.endswith(".py") and os.path.isfile(spec.origin)):
        return None
    try:
        with open(spec.origin, encoding="utf-8") as file:
            imported = _unconditional_imports(file.read())
    except (OSError, SyntaxError, ValueError):
        return None  # the full probe reports it, with the interpreter's own words
    for name in imported:
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if found is None:
            return name
    return None


if __name__ == "__main__" and sys.argv[1:2] == ["--imports"]:
    print(PROBE_PREFIX + json.dumps({"missing": missing_import(sys.argv[2])}), flush=True)
elif __name__ == "__main__":
    result = probe(sys.argv[1])
    sys.stdout.flush()
    print(PROBE_PREFIX + json.dumps(result), flush=True)
