"""The agent environments' cache (adapters/runner/agent_env.py), with uv faked: no network, no real install.

A changed requirements file (or runner requirements) builds a new environment; a changed source under
``adapters/`` only reinstalls the project; a failed or concurrent build never leaves a half environment.
"""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from adapters.runner import agent_env
from adapters.runner.agent_env import AgentEnvError, ensure_agent_env
from tests.support import agent_envs


class FakeUv:
    """Stands in for ``agent_env._run``: makes the venv's directory layout, records each step."""

    def __init__(self, fail_on: str | None = None, delay_s: float = 0.0) -> None:
        self.steps: list[str] = []
        self.commands: list[list[str]] = []
        self.fail_on = fail_on
        self.delay_s = delay_s
        self._lock = threading.Lock()

    def __call__(
        self,
        args: Sequence[str],
        *,
        what: str,
        requirements: Path,
        log_file: Path,
        cwd: Path | None = None,
        runner_requirements: Path | None = None,
    ) -> None:
        with self._lock:
            self.steps.append(what)
            self.commands.append(list(args))
        time.sleep(self.delay_s)
        if what == self.fail_on:
            raise AgentEnvError(f"cannot build the agent environment for {requirements}: {what} failed")
        if list(args[:2]) == ["uv", "venv"]:
            env = Path(args[-1])
            (env / "bin").mkdir(parents=True, exist_ok=True)
            (env / "bin" / "python").symlink_to(sys.executable)

    def builds(self) -> int:
        return self.steps.count("uv venv")

    def project_installs(self) -> int:
        return self.steps.count("installing agl-tinker into the environment")


def use(monkeypatch: pytest.MonkeyPatch, fake: FakeUv) -> FakeUv:
    monkeypatch.setattr(agent_env, "_run", fake)
    monkeypatch.setattr(agent_env, "find_uv", lambda: "uv")
    return fake


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
def uv(monkeypatch: pytest.MonkeyPatch) -> FakeUv:
    return use(monkeypatch, FakeUv())


def ensure(requirements: Path, project: Path, cache: Path) -> agent_env.AgentEnv:
    return ensure_agent_env(requirements, cache_dir=cache, project_root=project, log=lambda _: None)


def test_first_call_builds_the_env_and_installs_the_project_later_calls_reuse_it(
    tmp_path: Path, project: Path, requirements: Path, uv: FakeUv
) -> None:
    first = ensure(requirements, project, tmp_path / "cache")
    second = ensure(requirements, project, tmp_path / "cache")

    assert (first.built, first.project_installed) == (True, True)
    assert (second.built, second.project_installed) == (False, False)
    assert second.path == first.path and second.python == first.path / "bin" / "python"
    assert first.path.parent == tmp_path / "cache" / "agent-envs"
    assert first.path.name.startswith("my_agent-")  # requirements.txt: named after its directory
    assert (uv.builds(), uv.project_installs()) == (1, 1)
    venv, install, project_install, _import_check = uv.commands
    assert "--relocatable" in venv
    assert install[install.index("-r") :][:4] == [
        "-r",
        str(requirements),
        "-r",
        str(project / "scripts" / "runner-requirements.txt"),
    ]
    assert "--compile-bytecode" in install  # pip's default; else every runner start compiles agentlightning again
    assert {"--offline", "--no-deps", "--reinstall"} <= set(project_install)


def test_a_source_change_reinstalls_only_the_project(
    tmp_path: Path, project: Path, requirements: Path, uv: FakeUv
) -> None:
    first = ensure(requirements, project, tmp_path / "cache")
    (project / "adapters" / "runner" / "entry.py").write_text("VERSION = 2\n")
    second = ensure(requirements, project, tmp_path / "cache")
    (project / "pyproject.toml").write_text('[project]\nname = "agl-tinker"\nversion = "0.2"\n')
    third = ensure(requirements, project, tmp_path / "cache")

    assert second.path == third.path == first.path
    assert (second.built, second.project_installed) == (False, True)
    assert (third.built, third.project_installed) == (False, True)
    assert (uv.builds(), uv.project_installs()) == (1, 3)


def test_changes_outside_the_runner_sources_reinstall_nothing(
    tmp_path: Path, project: Path, requirements: Path, uv: FakeUv
) -> None:
    ensure(requirements, project, tmp_path / "cache")
    (project / "adapters" / "__pycache__").mkdir()
    (project / "adapters" / "__pycache__" / "x.py").write_text("# a cache file")
    (project / "README.md").write_text("docs\n")
    again = ensure(requirements, project, tmp_path / "cache")

    assert (again.built, again.project_installed) == (False, False)


@pytest.mark.parametrize("change", ["requirements", "included", "runner_requirements"])
def test_a_requirements_change_builds_a_new_env(
    tmp_path: Path, project: Path, requirements: Path, uv: FakeUv, change: str
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
    assert uv.builds() == 2


def test_the_python_version_is_part_of_the_key(
    tmp_path: Path, project: Path, requirements: Path, uv: FakeUv, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = ensure(requirements, project, tmp_path / "cache")
    monkeypatch.setattr(agent_env, "python_version", lambda python: "CPython 3.11.99")
    second = ensure(requirements, project, tmp_path / "cache")

    assert second.path != first.path and second.built


def test_a_relocatable_uv_venv_and_its_scripts_work_after_the_rename(tmp_path: Path) -> None:
    """What the build relies on: ``uv venv --relocatable`` built in one directory runs from another (offline)."""
    wheel = tmp_path / "demo-0.1-py3-none-any.whl"
    files = {
        "demo/__init__.py": "def main():\n    print('demo ran')\n",
        "demo-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: demo\nVersion: 0.1\n",
        "demo-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "demo-0.1.dist-info/entry_points.txt": "[console_scripts]\ndemo = demo:main\n",
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr("demo-0.1.dist-info/RECORD", "".join(f"{name},,\n" for name in [*files, "RECORD"]))
    uv, built, moved = agent_env.find_uv(), tmp_path / "built", tmp_path / "moved"
    step = {"requirements": tmp_path / "r.txt", "log_file": tmp_path / "log"}
    agent_env._run(
        [uv, "venv", "--quiet", "--relocatable", "--python", agent_env.base_python(), str(built)], what="venv", **step
    )
    install = [uv, "pip", "install", "--quiet", "--offline", "--no-cache", "--python", str(built / "bin" / "python")]
    agent_env._run([*install, str(wheel)], what="install", **step)
    built.rename(moved)

    ran = subprocess.run([moved / "bin" / "demo"], capture_output=True, text=True, check=True)
    prefix = subprocess.run(
        [moved / "bin" / "python", "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True, check=True
    )
    assert ran.stdout == "demo ran\n"
    assert prefix.stdout.strip() == str(moved)


def test_a_failed_build_leaves_no_env_and_the_next_call_builds_again(
    tmp_path: Path, project: Path, requirements: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use(monkeypatch, FakeUv(fail_on="uv pip install"))
    with pytest.raises(AgentEnvError, match=r"requirements\.txt"):
        ensure(requirements, project, tmp_path / "cache")
    envs = tmp_path / "cache" / "agent-envs"
    assert [p.name for p in envs.iterdir() if p.is_dir()] == []  # neither the env nor its temporary directory

    uv = use(monkeypatch, FakeUv())
    env = ensure(requirements, project, tmp_path / "cache")
    assert env.built and uv.builds() == 1


def test_a_build_killed_half_way_is_not_taken_for_ready(
    tmp_path: Path, project: Path, requirements: Path, uv: FakeUv
) -> None:
    env = ensure(requirements, project, tmp_path / "cache")
    # What a killed build leaves: its temporary directory, and no stamp (here: a ready env that lost it).
    (env.path.parent / f"{env.path.name}.tmp-killed").mkdir()
    (env.path / agent_env.ENV_STAMP).unlink()
    again = ensure(requirements, project, tmp_path / "cache")

    assert again.built and uv.builds() == 2
    assert not (env.path.parent / f"{env.path.name}.tmp-killed").exists()


def test_a_failed_project_install_is_redone_next_time(
    tmp_path: Path, project: Path, requirements: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use(monkeypatch, FakeUv(fail_on="installing agl-tinker into the environment"))
    with pytest.raises(AgentEnvError):
        ensure(requirements, project, tmp_path / "cache")
    uv = use(monkeypatch, FakeUv())
    env = ensure(requirements, project, tmp_path / "cache")

    assert (env.built, env.project_installed) == (False, True)  # the env was complete; only the project again
    assert (uv.builds(), uv.project_installs()) == (0, 1)


def test_concurrent_callers_build_the_env_once(
    tmp_path: Path, project: Path, requirements: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uv = use(monkeypatch, FakeUv(delay_s=0.05))
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
    assert (uv.builds(), uv.project_installs()) == (1, 1)
    assert sum(r.built for r in results) == 1


UV_CONFLICT = (
    "Using Python 3.11.7 environment at: /envs/x\n"
    "error: No solution found when resolving dependencies\n"
    "  cause: Because you require opentelemetry-sdk==1.45.0 and opentelemetry-sdk>=1.35,<1.45, we can conclude "
    "that your requirements are unsatisfiable.\n"
)


def fail_with(output: str) -> list[str]:
    return [sys.executable, "-c", f"import sys; print({output!r}, end=''); sys.exit(1)"]


def test_a_failing_step_is_one_line_naming_the_file_and_uvs_error(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    with pytest.raises(AgentEnvError) as raised:
        agent_env._run(
            fail_with(UV_CONFLICT), what="uv pip install", requirements=requirements, log_file=tmp_path / "log"
        )

    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        f"cannot build the agent environment for {requirements}: uv pip install failed (exit 1): "
    )
    assert "No solution found when resolving dependencies: Because you require opentelemetry-sdk==1.45.0" in message
    assert "Using Python" not in message  # uv's chatter before its error stays in the log
    assert "Using Python 3.11.7 environment" in (tmp_path / "log").read_text()


def test_a_conflict_with_a_runner_requirement_names_the_runner_requirements_file(tmp_path: Path) -> None:
    runner = tmp_path / "runner-requirements.txt"
    runner.write_text("# the runner part\nagentlightning==0.3.0\nopentelemetry-sdk >= 1.35, < 1.45  # a cap\n")
    with pytest.raises(AgentEnvError) as raised:
        agent_env._run(
            fail_with(UV_CONFLICT),
            what="uv pip install",
            requirements=tmp_path / "requirements.txt",
            log_file=tmp_path / "log",
            runner_requirements=runner,
        )

    assert f"unsatisfiable; opentelemetry-sdk>=1.35,<1.45 comes from {runner} (full log:" in str(raised.value)


def test_a_conflict_of_the_agents_own_requirements_names_no_runner_requirement(tmp_path: Path) -> None:
    runner = tmp_path / "runner-requirements.txt"
    runner.write_text("agentlightning==0.3.0\n")
    with pytest.raises(AgentEnvError) as raised:
        agent_env._run(
            fail_with(UV_CONFLICT),
            what="uv pip install",
            requirements=tmp_path / "requirements.txt",
            log_file=tmp_path / "log",
            runner_requirements=runner,
        )

    assert str(runner) not in str(raised.value)


def test_without_uv_the_error_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uv", None)  # not importable
    monkeypatch.setenv("PATH", "")
    with pytest.raises(AgentEnvError, match="pip install uv"):
        agent_env.find_uv()


def test_missing_requirements_file_is_an_error(tmp_path: Path, project: Path, uv: FakeUv) -> None:
    with pytest.raises(AgentEnvError, match="no requirements file"):
        ensure(tmp_path / "absent.txt", project, tmp_path / "cache")
    assert uv.steps == []


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
    assert requirements == ["agentlightning==0.3.0"]  # no OpenTelemetry cap: only the stock runner needs one
    assert (root / "pyproject.toml").is_file() and len(agent_env.project_hash(root)) == 64


@pytest.fixture
def index_answering_404() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)  # 501 to everything
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/simple/"
    server.shutdown()
    server.server_close()


def refused_url() -> str:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/simple/"


def test_tests_skip_a_failed_build_only_when_the_index_cannot_be_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index_answering_404: str
) -> None:
    def failing_build(requirements: Path, **_: object) -> agent_env.AgentEnv:
        raise AgentEnvError(f"cannot build the agent environment for {requirements}: uv pip install failed")

    monkeypatch.setattr(agent_envs, "ensure_agent_env", failing_build)
    monkeypatch.setenv("UV_DEFAULT_INDEX", index_answering_404)  # it answers (with an error status): a failure
    with pytest.raises(AgentEnvError):
        agent_envs.agent_env_or_skip(tmp_path / "requirements.txt")

    unreachable = refused_url()
    monkeypatch.setenv("UV_DEFAULT_INDEX", unreachable)
    with pytest.raises(pytest.skip.Exception) as skipped:
        agent_envs.agent_env_or_skip(tmp_path / "requirements.txt")
    assert f"the package index {unreachable} cannot be reached" in str(skipped.value)
