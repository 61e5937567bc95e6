"""Runner processes of the trainer's interpreter are forked from one fork server (``adapters.runner.fork_server``).

Each test starts real runner pools on a store address nothing listens at (the runners start, import their agent
and poll): the agent module (``fork_facts_agent``) writes at import what its process looks like, which must be
what a runner started as its own interpreter would see. That runners and their fork server end with a trainer
killed is in tests/integration/agl/test_store_auth.py. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from adapters.runner.processes import RunnerProcesses
from adapters.runner.protocol import FORK_ENV, FORK_SERVER_MODULE
from tests.support.waits import HANG_S, wait_until

pytestmark = pytest.mark.slow

AGENT = "tests.integration.runner.fork_facts_agent:reward_one"


def runner_files(where: Path) -> list[Path]:
    """The facts the runners wrote (the pool imports the agent here too, to check it: not this process's)."""
    return [path for path in sorted(where.glob("*.json")) if path.stem != str(os.getpid())]


def facts(where: Path, n: int) -> list[dict[str, object]]:
    wait_until(lambda: len(runner_files(where)) >= n, f"{n} runners never imported their agent")
    return [json.loads(path.read_text()) for path in runner_files(where)]


def command(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_runners_are_forked_from_one_server_each_as_a_spawned_runner_would_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGL_TINKER_TEST_FACTS", str(tmp_path))
    monkeypatch.setenv("AGL_TINKER_TEST_MARK", "first")
    monkeypatch.chdir(tmp_path)
    first = RunnerProcesses(AGENT, "http://127.0.0.1:9", 2).start().supervise()
    try:
        seen = facts(tmp_path, 2)
        servers = {int(fact["ppid"]) for fact in seen}  # type: ignore[call-overload]
        assert len(servers) == 1 and os.getpid() not in servers, seen
        (server,) = servers
        assert FORK_SERVER_MODULE in command(server)
        for fact in seen:
            assert fact["sid"] == fact["pid"], "a runner has a session of its own"
            assert fact["stdin"] == os.devnull
            assert fact["comm"] == "agl-runner", "ps and top name it"
            assert fact["cwd"] == str(tmp_path) and fact["mark"] == "first"

        # A respawn is a fork of the same server; a kill is reported as one.
        victim = first._processes[0]
        victim.kill()
        victim.join(HANG_S)
        assert victim.exitcode == -signal.SIGKILL
        wait_until(lambda: len(runner_files(tmp_path)) >= 3, "the killed runner was never started again")

        # Another working directory and environment reach the runners started under them.
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        monkeypatch.setenv("AGL_TINKER_TEST_MARK", "second")
        second = RunnerProcesses(AGENT, "http://127.0.0.1:9", 1, first_worker_id=10).start()
        try:
            latest = facts(tmp_path, 4)
            (newest,) = [fact for fact in latest if fact["mark"] == "second"]
            assert newest["cwd"] == str(elsewhere)
        finally:
            second.stop()
    finally:
        first.stop()


def test_with_forking_off_each_runner_is_its_own_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_TINKER_TEST_FACTS", str(tmp_path))
    monkeypatch.setenv(FORK_ENV, "0")
    runners = RunnerProcesses(AGENT, "http://127.0.0.1:9", 1).start()
    try:
        (fact,) = facts(tmp_path, 1)
        assert fact["ppid"] == os.getpid()
    finally:
        runners.stop()
