"""Runner processes find the commands their environment installs (``adapters.runner.processes.RunnerChild``).

An agent's requirements may install the command its tools run as (an MCP server started by name, as
Agent-lightning's calc_x starts ``uvx mcp-server-calculator``); the runner process must find it without the
user activating that environment. A stand-in interpreter (a shell script in a fake environment's ``bin/``)
records what the child sees.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from adapters.runner.processes import RunnerChild, RunnerSettings

HANG_S = 60.0
"""Hang-only bound on the stand-in interpreter's run (a shell script that exits at once)."""


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def run_child(python: Path) -> None:
    settings = RunnerSettings(
        parent_pid=os.getpid(),
        agent="examples.hello.hello:hello",
        store_url="http://127.0.0.1:9",
        worker_id=0,
        poll_interval_s=0.05,
        token=None,
        concurrency=1,
    )
    child = RunnerChild(str(python), settings, name="agl-runner-0")
    child.start()
    child.join(HANG_S)
    assert child.exitcode == 0


def test_a_runner_finds_a_command_of_its_own_environment_by_name_before_the_trainers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_bin, elsewhere = tmp_path / "agent-env" / "bin", tmp_path / "trainer-bin"
    executable(env_bin / "mcp-tool", "#!/bin/sh\n")
    executable(elsewhere / "mcp-tool", "#!/bin/sh\n")  # the same name earlier on the trainer's PATH
    seen = tmp_path / "seen"
    python = executable(
        env_bin / "python", f'#!/bin/sh\ncommand -v mcp-tool > "{seen}"\nprintf "%s\\n" "$PATH" >> "{seen}"\n'
    )
    monkeypatch.setenv("PATH", os.pathsep.join([str(elsewhere), str(env_bin), os.environ["PATH"]]))

    run_child(python)

    found, path = seen.read_text().splitlines()
    assert found == str(env_bin / "mcp-tool")
    entries = path.split(os.pathsep)
    assert entries[0] == str(env_bin) and entries.count(str(env_bin)) == 1
    assert entries[1:] == [str(elsewhere), *os.environ["PATH"].split(os.pathsep)[2:]]  # the rest kept, in order


def test_the_environment_bin_is_the_interpreters_own_directory_not_its_links_target(tmp_path: Path) -> None:
    """A venv's ``bin/python`` is a link to the base interpreter; its console scripts are beside the link."""
    env_bin = tmp_path / "agent-env" / "bin"
    seen = tmp_path / "seen"
    real = executable(tmp_path / "base" / "bin" / "python3", f'#!/bin/sh\nprintf "%s\\n" "$PATH" > "{seen}"\n')
    env_bin.mkdir(parents=True)
    (env_bin / "python").symlink_to(real)

    run_child(env_bin / "python")

    assert seen.read_text().split(os.pathsep)[0] == str(env_bin)
