"""Checks of a run's inputs that take milliseconds, made before anything heavy is imported.

``agl-tinker train`` imports Agent-lightning, LiteLLM and torch (15-30 s) before it touches the
task files, the model directory or the agent; a typo there used to cost that wait and, for a
corrupt model, a screen of traceback. These checks read only files and sockets, with the standard
library, ``domain.tasks`` and ``domain.chats``, and report the first problem as one line. One starts a
process: the quick probe of the interpreter the runners will use (``runner_python``, else this one),
which reads the agent's module there and names a package it imports that is missing there (a fraction
of a second, where loading the agent takes Agent-lightning's import first: tens of seconds).
"""

from __future__ import annotations

import errno
import importlib.machinery
import importlib.util
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from returns.result import Failure, Result, Success

from app.config import DEMO, PRETRAINED_MODEL_NAMES, TrainConfig
from domain.chats import parse_chats
from domain.tasks import TaskFileError, Tasks, parse_csv_tasks, parse_json_tasks, parse_jsonl_tasks

EXIT_INPUT = 2
"""Bad task or warm-start files, a port already taken: the user's input, like a bad config."""
EXIT_SETUP = 1
"""A missing model or agent: the codes ``train`` has always used for them."""

_TASK_PARSERS: dict[str, Callable[[str, str], Result[Tasks, TaskFileError]]] = {
    ".jsonl": parse_jsonl_tasks,
    ".json": parse_json_tasks,
    ".csv": parse_csv_tasks,
}
_MODEL_JSON_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json")


@dataclass(frozen=True, slots=True)
class PreflightError:
    """The first problem found, as one line, and the exit code it deserves."""

    message: str
    exit_code: int

    def __str__(self) -> str:
        return self.message


def preflight(config: TrainConfig) -> Result[TrainConfig, PreflightError]:
    """``config`` if its files, agent and ports look usable; else the first problem found."""
    checks: list[Callable[[], PreflightError | None]] = [
        lambda: _task_file(config.tasks),
        lambda: _task_file(config.test_tasks),
        lambda: _warm_start_file(config),
        lambda: _model_dir(config),
        lambda: _agent(config),
        lambda: _agent_imports(config),
        lambda: _ports(config),
    ]
    for check in checks:
        problem = check()
        if problem is not None:
            return Failure(problem)
    return Success(config)


def _task_file(source: str | None) -> PreflightError | None:
    if source is None or source == DEMO:
        return None
    path = Path(source)
    if not path.is_file():
        return PreflightError(f"task file {source} does not exist", EXIT_INPUT)
    if path.suffix == ".parquet":
        return None  # read with pandas at launch; its columns cannot be checked without it
    parse = _TASK_PARSERS.get(path.suffix)
    if parse is None:
        return PreflightError(
            f"unsupported task file type {path.suffix!r} for {source}: use .jsonl, .json, .csv or .parquet", EXIT_INPUT
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return PreflightError(f"{source}: cannot read tasks ({error})", EXIT_INPUT)
    parsed = parse(text, source)
    return PreflightError(str(parsed.failure()), EXIT_INPUT) if isinstance(parsed, Failure) else None


def _warm_start_file(config: TrainConfig) -> PreflightError | None:
    """The file parsed as ``app.launch`` parses it (``domain.chats``), without the renderer it needs afterwards."""
    file = config.warm_start.file
    if config.warm_start.steps == 0 or file is None:
        return None
    path = Path(file)
    if not path.is_file():
        return PreflightError(f"warm-start file {path} does not exist", EXIT_INPUT)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return PreflightError(f"warm-start file {path}: cannot read it ({error})", EXIT_INPUT)
    parsed = parse_chats(text, str(path))
    return PreflightError(str(parsed.failure()), EXIT_INPUT) if isinstance(parsed, Failure) else None


def _model_dir(config: TrainConfig) -> PreflightError | None:
    """A local model directory must hold readable JSON where Hugging Face expects it (weights are not read)."""
    if config.policy.backend != "local" or config.policy.model_path is None:
        return None
    path = Path(config.policy.model_path).expanduser()
    if not (path / "config.json").is_file():
        if config.policy.model_path in PRETRAINED_MODEL_NAMES:
            return None  # materialised at launch, which says what to install when its package is missing
        return PreflightError(f"no Hugging Face model at {path} (expected {path / 'config.json'})", EXIT_SETUP)
    for name in _MODEL_JSON_FILES:
        file = path / name
        if not file.is_file():
            continue
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            return PreflightError(
                f"the model at {path} is corrupt: {name} is not valid JSON ({error.msg}, line {error.lineno})",
                EXIT_SETUP,
            )
        except (OSError, UnicodeDecodeError) as error:
            return PreflightError(f"the model at {path} is unreadable: {name} ({error})", EXIT_SETUP)
        if not isinstance(data, dict):
            return PreflightError(f"the model at {path} is corrupt: {name} is not a JSON object", EXIT_SETUP)
    return None


def _agent(config: TrainConfig) -> PreflightError | None:
    """The agent's module file can be found (nothing is imported); only this run's runners load it."""
    if config.n_runners == 0:
        return None
    reference = config.agent
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        return PreflightError(f"agent reference {reference!r} must look like 'package.module:attribute'", EXIT_SETUP)
    missing = _missing_module(module_name)
    if missing is not None:
        return PreflightError(f"cannot load agent {reference!r}: no module named {missing!r}", EXIT_SETUP)
    return None


QUICK_PROBE_TIMEOUT_S = 60.0
"""Only catches a hang (the quick probe imports nothing); a probe that does not answer is left to the full one."""
PROBE_PREFIX = "agl-tinker-probe: "
"""``adapters.runner.probe``'s report line (not imported: this module stays off the adapters)."""


def _agent_imports(config: TrainConfig) -> PreflightError | None:
    """A package the agent's module imports that the runners' interpreter lacks, named before the heavy imports.

    Anything the quick probe cannot say (the interpreter or this project's runner part missing there) is left to
    the full probe that ``app.launch`` runs next, which names the problem and its fix.
    """
    if config.n_runners == 0:
        return None
    python = config.runner_python or sys.executable
    try:
        done = subprocess.run(
            [python, "-m", "adapters.runner.probe", "--imports", config.agent],
            capture_output=True, text=True, timeout=QUICK_PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith(PROBE_PREFIX)]
    try:
        missing = json.loads(lines[-1][len(PROBE_PREFIX) :]).get("missing") if lines else None
    except (ValueError, AttributeError):
        return None
    if not isinstance(missing, str):
        return None
    where = f"runner environment {config.runner_python}: " if config.runner_python else ""
    return PreflightError(f"{where}cannot load agent {config.agent!r}: No module named {missing!r}", EXIT_SETUP)


def _missing_module(dotted: str) -> str | None:
    """The first part of ``dotted`` that no finder locates (parents are searched, not imported)."""
    path = sys.path if (os.getcwd() in sys.path or "" in sys.path) else [os.getcwd(), *sys.path]
    parts = dotted.split(".")
    try:
        spec = importlib.machinery.PathFinder.find_spec(parts[0], path) or importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        spec = None
    for depth in range(1, len(parts) + 1):
        if spec is None:
            return ".".join(parts[:depth])
        if depth == len(parts):
            return None
        locations: Sequence[str] | None = spec.submodule_search_locations
        if locations is None:  # a plain module has no submodules
            return ".".join(parts[: depth + 1])
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: depth + 1]), list(locations))
    return None


def _ports(config: TrainConfig) -> PreflightError | None:
    """A configured port another process holds fails here, not after the model has loaded."""
    wanted = [(config.endpoint_host, config.endpoint_port)]
    if config.store_url is None:
        wanted.append(("127.0.0.1", config.store_port))
    for host, port in wanted:
        if port is not None and port_in_use(host, port):
            return PreflightError(f"port {port} on {host} is in use", EXIT_INPUT)
    return None


def port_in_use(host: str, port: int) -> bool:
    """Whether binding ``host:port`` fails because someone holds it (as the servers bind: SO_REUSEADDR)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False
