"""``agl-tinker train`` on bad input: one ``error:`` line and its exit code, before the heavy imports.

Each case prints how long the command took (15-30 s when these problems were found after importing
Agent-lightning and torch); the time is shown, not asserted.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import cli


def timed_cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.perf_counter()
    result = cli(*args)
    return result, time.perf_counter() - started


def bad_tasks(tmp: Path) -> tuple[list[str], str]:
    (tmp / "tasks.jsonl").write_text('{"q": 1}\n{"q": \n')
    return [f"tasks={tmp / 'tasks.jsonl'}"], f"error: {tmp / 'tasks.jsonl'}:2: not a JSON value"


def corrupt_model(tmp: Path) -> tuple[list[str], str]:
    (tmp / "model").mkdir()
    (tmp / "model" / "config.json").write_text('{"model_type": ')
    return [f"policy.model_path={tmp / 'model'}"], f"error: the model at {tmp / 'model'} is corrupt: config.json"


def bad_agent(_tmp: Path) -> tuple[list[str], str]:
    return ["agent=my_agent.rollout"], "error: agent reference 'my_agent.rollout' must look like"


def agent_needing_a_missing_package(_tmp: Path) -> tuple[list[str], str]:
    """Refused by the quick probe in the runners' environment (the trainer's own here), not after loading
    Agent-lightning there (53 s on a busy machine)."""
    agent = "tests.integration.trainer_only_agent:solve"
    return [f"agent={agent}", f"runner_python={sys.executable}"], (
        f"error: runner environment {sys.executable}: cannot load agent '{agent}': "
        "No module named 'trainer_only_package_xyz'"
    )


def missing_warm_start(tmp: Path) -> tuple[list[str], str]:
    return [f"warm_start.file={tmp / 'chats.jsonl'}"], f"error: warm-start file {tmp / 'chats.jsonl'} does not exist"


@pytest.mark.parametrize(
    ("case", "code"),
    [(bad_tasks, 2), (missing_warm_start, 2), (corrupt_model, 1), (bad_agent, 1), (agent_needing_a_missing_package, 1)],
    ids=lambda c: getattr(c, "__name__", str(c)),
)
def test_bad_input_fails_fast_in_one_line(
    tmp_path: Path, case: Callable[[Path], tuple[list[str], str]], code: int
) -> None:
    overrides, message = case(tmp_path)
    result, elapsed = timed_cli("train", *overrides, f"log_path={tmp_path / 'run'}")
    print(f"{case.__name__}: exit {result.returncode} in {elapsed:.2f}s")
    assert result.returncode == code, result.stderr
    assert result.stderr.splitlines()[0].startswith(message), result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert not (tmp_path / "run").exists()  # nothing started, nothing written


def test_a_port_in_use_fails_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result, elapsed = timed_cli("train", f"endpoint_port={port}", f"log_path={tmp_path / 'run'}")
    print(f"port in use: exit {result.returncode} in {elapsed:.2f}s")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"error: port {port} on 127.0.0.1 is in use"]
