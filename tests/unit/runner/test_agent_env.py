"""The agent environments' cache (adapters/runner/agent_env.py), with pip faked: no network, no real install.

A changed requirements file (or runner requirements) builds a new environment; a changed source under
``adapters/`` only reinstalls the project; a failed or concurrent build never leaves a half environment.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from adapters.runner import agent_env
from adapters.runner.agent_env import AgentEnvError, ensure_agent_env


class FakePip:
    """Stands in for ``agent_env._run``: makes the venv's directory layout, records each step."""

    def __init__(self, fail_on: str | None = None, delay_s: float = 0.0) -> None:
        self.steps: list[str] = []
        self.fail_on = fail_on
        self.delay_s = delay_s
        self._lock = threading.Lock()

    def __call__(
        self, args: Sequence[str], *, what: str, requirements: Path, log_file: Path, cwd: Path | None = None
    ) -> None:
        with self._lock:
            self.steps.append(what)
        time.sleep(self.delay_s)
        if what == self.fail_on:
            raise AgentEnvError(f"cannot build the agent environment for {requirements}: {what} failed")
        if list(args[1:3]) == ["-m", "venv"]:
            env = Path(args[-1])
            (env / "bin").mkdir(parents=True, exist_ok=True)
            (env / "bin" / "python").symlink_to(sys.executable)
            (env / "bin" / "pip").write_text(f"#!{env}/bin/python\nimport pip\n")

    def builds(self) -> int:
        return self.steps.count("python -m venv")

    def project_installs(self) -> int:
        return self.steps.count("installing agl-tinker into the environment")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A minimal checkout: pyproject.toml, the runner requirements and an adapters package."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    (root / "adapters" / "runner").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "agl-tinker"\n')
    (root / "scripts" / "runner-requirements.txt").write_text("agentlightning==0.3.0\n")
    (root / "adapters" / "__init__.py").write_text("")
    (root / "adapters" / "runner" / "__init__.py").write_text("")
    (root / "adapters" / "runner" / "entry.py").write_text("VERSION = 1\n")
    return root


@pytest.fixture
def requirements(tmp_path: Path) -> Path:
    path = tmp_path / "my_agent" / "requirements.txt"
    path.parent.mkdir()
    path.write_text("autogen-agentchat==0.7.5\n")
    return path


@pytest.fixture
def pip(monkeypatch: pytest.MonkeyPatch) -> FakePip:
    fake = FakePip()
    monkeypatch.setattr(agent_env, "_run", fake)
    return fake


def ensure(requirements: Path, project: Path, cache: Path) -> agent_env.AgentEnv:
    return ensure_agent_env(requirements, cache_dir=cache, project_root=project, log=lambda _: None)


def test_first_call_builds_the_env_and_installs_the_project_later_calls_reuse_it(
    tmp_path: Path, project: Path, requirements: Path, pip: FakePip
) -> None:
    first = ensure(requirements, project, tmp_path / "cache")
    second = ensure(requirements, project, tmp_path / "cache")

    assert (first.built, first.project_installed) == (True, True)
    assert (second.built, second.project_installed) == (False, False)
    assert second.path == first.path and second.python == first.path / "bin" / "python"
    assert first.path.parent == tmp_path / "cache" / "agent-envs"
    assert first.path.name.startswith("my_agent-")  # requirements.txt: named after its directory
    assert (pip.builds(), pip.project_installs()) == (1, 1)
    assert pip.steps[:3] == ["python -m venv", "upgrading pip", "pip install"]


def test_a_source_change_reinstalls_only_the_project(
    tmp_path: Path, project: Path, requirements: Path, pip: FakePip
) -> None:
    first = ensure(requirements, project, tmp_path / "cache")
    (project / "adapters" / "runner" / "entry.py").write_text("VERSION = 2\n")
    second = ensure(requirements, project, tmp_path / "cache")
    (project / "pyproject.toml").write_text('[project]\nname = "agl-tinker"\nversion = "0.2"\n')
    third = ensure(requirements, project, tmp_path / "cache")

    assert second.path == third.path == first.path
    assert (second.built, second.project_installed) == (False, True)
    assert (third.built, third.project_installed) == (False, True)
    assert (pip.builds(), pip.project_installs()) == (1, 3)


def test_changes_outside_the_runner_sources_reinstall_nothing(
    tmp_path: Path, project: Path, requirements: Path, pip: FakePip
) -> None:
    ensure(requirements, project, tmp_path / "cache")
    (project / "adapters" / "__pycache__").mkdir()
    (project / "adapters" / "__pycache__" / "x.py").write_text("# a cache file")
    (project / "README.md").write_text("docs\n")
    again = ensure(requirements, project, tmp_path / "cache")

    assert (again.built, again.project_installed) == (False, False)


@pytest.mark.parametrize("change", ["requirements", "included", "runner_requirements"])
def test_a_requirements_change_builds_a_new_env(
    tmp_path: Path, project: Path, requirements: Path, pip: FakePip, change: str
) -> None:
    included = requirements.parent / "pins.txt"
    included.write_text("mcp<2\n")
    requirements.write_text("autogen-agentchat==0.7.5\n-r pins.txt\n")
    first = ensure(requirements, project, tmp_path / "cache")
    edited = {
        "requirements": requirements,
        "included": included,
        "runner_requirements": project / "scripts" / "runner-requirements.txt",
    }[change]
    edited.write_text(edited.read_text() + "pydantic>=2\n")
    second = ensure(requirements, project, tmp_path / "cache")

    assert second.path != first.path
    assert (second.built, second.project_installed) == (True, True)
    assert pip.builds() == 2


def test_the_python_version_is_part_of_the_key(
    tmp_path: Path, project: Path, requirements: Path, pip: FakePip, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = ensure(requirements, project, tmp_path / "cache")
    monkeypatch.setattr(agent_env, "python_version", lambda python: "CPython 3.11.99")
    second = ensure(requirements, project, tmp_path / "cache")

    assert second.path != first.path and second.built


def test_scripts_point_at_the_final_env_after_the_rename(
    tmp_path: Path, project: Path, requirements: Path, pip: FakePip
) -> None:
    env = ensure(requirements, project, tmp_path / "cache")

    assert (env.path / "bin" / "pip").read_text().startswith(f"#!{env.path}/bin/python\n")
    assert [p.name for p in env.path.parent.iterdir() if ".tmp-" in p.name] == []


def test_a_failed_build_leaves_no_env_and_the_next_call_builds_again(
    tmp_path: Path, project: Path, requirements: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_env, "_run", FakePip(fail_on="pip install"))
    with pytest.raises(AgentEnvError, match=r"requirements\.txt"):
        ensure(requirements, project, tmp_path / "cache")
    envs = tmp_path / "cache" / "agent-envs"
    assert [p.name for p in envs.iterdir() if p.is_dir()] == []  # neither the env nor its temporary directory

    pip = FakePip()
    monkeypatch.setattr(agent_env, "_run", pip)
    env = ensure(requirements, project, tmp_path / "cache")
    assert env.built and pip.builds() == 1


def test_a_build_killed_half_way_is_not_taken_for_ready(
    tmp_path: Path, project: Path, requirements: Path, pip: FakePip
) -> None:
    env = ensure(requirements, project, tmp_path / "cache")
    # What a killed build leaves: its temporary directory, and no stamp (here: a ready env that lost it).
    (env.path.parent / f"{env.path.name}.tmp-killed").mkdir()
    (env.path / agent_env.ENV_STAMP).unlink()
    again = ensure(requirements, project, tmp_path / "cache")

    assert again.built and pip.builds() == 2
    assert not (env.path.parent / f"{env.path.name}.tmp-killed").exists()


def test_a_failed_project_install_is_redone_next_time(
    tmp_path: Path, project: Path, requirements: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_env, "_run", FakePip(fail_on="installing agl-tinker into the environment"))
    with pytest.raises(AgentEnvError):
        ensure(requirements, project, tmp_path / "cache")
    pip = FakePip()
    monkeypatch.setattr(agent_env, "_run", pip)
    env = ensure(requirements, project, tmp_path / "cache")

    assert (env.built, env.project_installed) == (False, True)  # the env was complete; only the project again
    assert (pip.builds(), pip.project_installs()) == (0, 1)


def test_concurrent_callers_build_the_env_once(
    tmp_path: Path, project: Path, requirements: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pip = FakePip(delay_s=0.05)
    monkeypatch.setattr(agent_env, "_run", pip)
    results: list[agent_env.AgentEnv] = []
    threads = [
        threading.Thread(target=lambda: results.append(ensure(requirements, project, tmp_path / "cache")))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(results) == 3 and len({r.path for r in results}) == 1
    assert (pip.builds(), pip.project_installs()) == (1, 1)
    assert sum(r.built for r in results) == 1


def test_a_failing_step_is_one_line_naming_the_file_and_the_last_errors(tmp_path: Path) -> None:
    script = "import sys; print('Collecting x'); print('ERROR: Could not find a version that satisfies x'); sys.exit(1)"
    requirements = tmp_path / "requirements.txt"
    with pytest.raises(AgentEnvError) as raised:
        agent_env._run(
            [sys.executable, "-c", script], what="pip install", requirements=requirements, log_file=tmp_path / "log"
        )

    message = str(raised.value)
    assert "\n" not in message
    assert str(requirements) in message and "ERROR: Could not find a version that satisfies x" in message
    assert not raised.value.unreachable_index
    assert "Collecting x" in (tmp_path / "log").read_text()


def test_an_unreachable_index_is_told_apart(tmp_path: Path) -> None:
    script = "import sys; print('WARNING: Retrying ... Failed to establish a new connection'); sys.exit(1)"
    with pytest.raises(AgentEnvError) as raised:
        agent_env._run(
            [sys.executable, "-c", script], what="pip install", requirements=tmp_path / "r.txt", log_file=tmp_path / "l"
        )

    assert raised.value.unreachable_index


def test_missing_requirements_file_is_an_error(tmp_path: Path, project: Path, pip: FakePip) -> None:
    with pytest.raises(AgentEnvError, match="no requirements file"):
        ensure(tmp_path / "absent.txt", project, tmp_path / "cache")
    assert pip.steps == []


@pytest.mark.parametrize(
    ("path", "name"),
    [("examples/autogen_mcp/requirements.txt", "autogen_mcp"), ("envs/crewai.txt", "crewai")],
)
def test_env_names(tmp_path: Path, path: str, name: str) -> None:
    assert agent_env.env_name(tmp_path / path) == name


def test_the_real_checkout_has_what_an_env_needs() -> None:
    root = agent_env.PROJECT_ROOT
    lines = agent_env.RUNNER_REQUIREMENTS.read_text().splitlines()
    requirements = [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]
    assert "agentlightning==0.3.0" in requirements
    assert not [r for r in requirements if r.startswith(("torch", "tinker"))]
    assert (root / "pyproject.toml").is_file() and len(agent_env.project_hash(root)) == 64
