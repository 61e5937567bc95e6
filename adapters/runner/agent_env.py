"""A Python environment of its own for an agent whose framework conflicts with the trainer's lock.

AutoGen 0.7.5 needs ``protobuf~=5.29`` and ``mcp<2``, CrewAI needs ``jiter<0.15``: neither installs
beside the trainer's locked versions. Such an agent runs in its own virtual environment, built once
from a requirements file, and the run starts its runner processes with that environment's Python
(``runner_python=...``). The environment holds the agent's requirements, what the runner part of this
project needs (``scripts/runner-requirements.txt``: agentlightning and the OpenTelemetry cap, no
torch, tinker or tinker-cookbook) and this project itself, installed without dependencies and not
editable, so ``python -m adapters.runner.entry`` works there.

The cache has two layers, under ``${AGL_TINKER_CACHE:-~/.cache/agl-tinker}/agent-envs/``:

- the environment ``<name>-<key>/``, keyed on the requirements file (and the files it includes), the
  runner requirements and the Python version: a changed requirement builds a new environment (a
  few minutes, pip); nothing else does;
- this project's installation inside it, stamped with a hash of the sources under ``adapters/`` and
  ``pyproject.toml``: a code change reinstalls only the project (``--no-deps``, seconds).

A build holds a file lock (two processes asking for the same environment build it once) and happens
in a temporary directory renamed into place when complete, so a killed build never leaves a half
environment that a later call takes for ready.

Standard library only: it runs under any Python 3.11, before the trainer's dependencies exist.
``python -m adapters.runner.agent_env path/to/requirements.txt`` (or ``scripts/agent-env.sh``) prints the
environment's Python on its last line.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from adapters.files.cache import cache_root

BASE_PYTHON_ENV = "AGL_TINKER_AGENT_PYTHON"
"""Overrides the interpreter the environments are made from (default: this one's base interpreter)."""
PROJECT_ROOT = Path(__file__).resolve().parents[2]
RUNNER_REQUIREMENTS = PROJECT_ROOT / "scripts" / "runner-requirements.txt"
ENV_STAMP = "agl-tinker-env.json"
PROJECT_STAMP = "agl-tinker-project.sha256"
BUILD_REQUIREMENTS = ("setuptools>=77",)
"""Installed with the environment, so this project installs without build isolation (offline, seconds)."""
_PROJECT_PACKAGES = ("domain", "ports", "adapters", "app")
_PROJECT_FILES = ("pyproject.toml", "README.md")
_INCLUDE = re.compile(r"^\s*(?:-r|-c|--requirement|--constraint)(?:\s*=\s*|\s+)(\S+)")
_UNREACHABLE = (
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Could not fetch URL",
    "ConnectTimeoutError",
    "Read timed out",
    "ProxyError",
    "Max retries exceeded",
)

Log = Callable[[str], None]


class AgentEnvError(RuntimeError):
    """The environment could not be built; the message is one line naming the requirements file."""

    def __init__(self, message: str, *, unreachable_index: bool = False) -> None:
        super().__init__(message)
        self.unreachable_index = unreachable_index
        """True when pip's output says it could not reach the package index (a machine offline)."""


@dataclass(frozen=True, slots=True)
class AgentEnv:
    path: Path
    python: Path
    built: bool
    """The environment was built by this call (else it came from the cache)."""
    project_installed: bool
    """This project was (re)installed into it by this call."""


def base_python() -> str:
    """The interpreter new environments are made from: never a virtual environment's own Python."""
    configured = os.environ.get(BASE_PYTHON_ENV, "").strip()
    if configured:
        return configured
    base = getattr(sys, "_base_executable", "") or sys.executable
    return base if base and Path(base).exists() else (shutil.which("python3") or sys.executable)


def env_name(requirements: Path) -> str:
    """``autogen_mcp`` for ``examples/autogen_mcp/requirements.txt``, ``crewai`` for ``crewai.txt``."""
    stem = requirements.stem
    if stem.lower() in ("requirements", "requirement", "reqs") and requirements.resolve().parent.name:
        stem = requirements.resolve().parent.name
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", stem) or "agent"


def _requirement_texts(requirements: Path, seen: set[Path] | None = None) -> list[bytes]:
    """The file's bytes followed by those of every ``-r``/``-c`` file it names (recursively)."""
    seen = set() if seen is None else seen
    path = requirements.resolve()
    if path in seen:
        return []
    seen.add(path)
    content = path.read_bytes()
    texts = [content]
    for line in content.decode("utf-8", "replace").splitlines():
        match = _INCLUDE.match(line)
        if match:
            included = (path.parent / match.group(1)).resolve()
            if included.is_file():
                texts += _requirement_texts(included, seen)
    return texts


def python_version(python: str) -> str:
    """``sys.version`` of ``python`` (version, build and compiler: what compiled wheels depend on)."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys, platform; print(platform.python_implementation(), sys.version)"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise AgentEnvError(f"cannot run the base Python {python!r}: {error}") from error
    return " ".join(out.stdout.split())


def env_key(requirements: Path, runner_requirements: Path, version: str) -> str:
    digest = hashlib.sha256()
    for text in [*_requirement_texts(requirements), runner_requirements.read_bytes(), version.encode()]:
        digest.update(hashlib.sha256(text).digest())
    return digest.hexdigest()[:16]


def project_hash(project_root: Path = PROJECT_ROOT) -> str:
    """What the project layer is keyed on: the Python sources under ``adapters/`` and ``pyproject.toml``."""
    digest = hashlib.sha256()
    files = sorted(p for p in (project_root / "adapters").rglob("*.py") if "__pycache__" not in p.parts)
    for path in [project_root / "pyproject.toml", *files]:
        digest.update(path.relative_to(project_root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _clean_env() -> dict[str, str]:
    """The environment for pip and the new interpreter: nothing of the caller's virtual environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _last_error_lines(output: str, n: int = 3) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR") or "error:" in line.lower()]
    return " | ".join((errors or lines)[-n:]) or "(no output)"


def _run(args: Sequence[str], *, what: str, requirements: Path, log_file: Path, cwd: Path | None = None) -> None:
    """Run one build step, its output appended to ``log_file``; failure becomes a one-line ``AgentEnvError``."""
    with log_file.open("a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(args)}\n")
        log.flush()
        result = subprocess.run(
            list(args), cwd=cwd, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        log.write(result.stdout)
    if result.returncode != 0:
        unreachable = any(marker in result.stdout for marker in _UNREACHABLE)
        offline = "; pip could not reach its package index" if unreachable else ""
        raise AgentEnvError(
            f"cannot build the agent environment for {requirements}: {what} failed "
            f"(exit {result.returncode}{offline}): {_last_error_lines(result.stdout)} (full log: {log_file})",
            unreachable_index=unreachable,
        )


@contextlib.contextmanager
def _locked(lock_path: Path, log: Log) -> Iterator[None]:
    """The environment's lock, held across processes (and threads) while it is checked, built or updated."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"agent-env: waiting for another process building {lock_path.with_suffix('')}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _retarget_scripts(env: Path, old: Path) -> None:
    """After the rename: point ``bin/`` scripts (pip's shebangs, ``activate``) at the final path."""
    old_bytes, new_bytes = str(old).encode(), str(env).encode()
    for script in (env / "bin").iterdir():
        if script.is_symlink() or not script.is_file() or script.stat().st_size > 1_000_000:
            continue
        content = script.read_bytes()
        if old_bytes in content and b"\0" not in content:
            script.write_bytes(content.replace(old_bytes, new_bytes))


def _build_env(
    env: Path,
    *,
    python: str,
    requirements: Path,
    runner_requirements: Path,
    key: str,
    version: str,
    log_file: Path,
    log: Log,
) -> None:
    """Build the environment in a temporary directory beside ``env`` and rename it into place."""
    for stale in env.parent.glob(f"{env.name}.tmp-*"):  # a build killed earlier (we hold the lock)
        shutil.rmtree(stale, ignore_errors=True)
    if env.exists():  # no stamp: not a finished environment
        shutil.rmtree(env)
    tmp = Path(tempfile.mkdtemp(prefix=f"{env.name}.tmp-", dir=env.parent))
    log_file.write_text("")
    started = time.monotonic()
    try:
        log(f"agent-env: building {env} from {requirements} (once; pip, a few minutes)")
        # --clear: mkdtemp made the directory; venv fills it.
        _run(
            [python, "-m", "venv", "--clear", str(tmp)],
            what="python -m venv",
            requirements=requirements,
            log_file=log_file,
        )
        pip = [str(tmp / "bin" / "python"), "-m", "pip"]
        _run(
            [*pip, "install", "--quiet", "--upgrade", "pip"],
            what="upgrading pip",
            requirements=requirements,
            log_file=log_file,
        )
        _run(
            [*pip, "install", "-r", str(requirements), "-r", str(runner_requirements), *BUILD_REQUIREMENTS],
            what="pip install",
            requirements=requirements,
            log_file=log_file,
            cwd=requirements.parent,  # relative paths in the file are the user's, next to it
        )
        stamp = {
            "key": key,
            "requirements": str(requirements),
            "runner_requirements": str(runner_requirements),
            "python": python,
            "python_version": version,
            "build_s": round(time.monotonic() - started, 1),
        }
        (tmp / ENV_STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
        tmp.chmod(0o755)  # mkdtemp made it private; a venv is not
        tmp.rename(env)
        _retarget_scripts(env, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"agent-env: built {env} in {time.monotonic() - started:.0f} s")


def _copy_project(project_root: Path, into: Path) -> Path:
    """The files pip needs to build this project, copied so the build writes nothing into the checkout."""
    source = into / "agl-tinker"
    source.mkdir()
    for name in _PROJECT_FILES:
        if (project_root / name).is_file():
            shutil.copy2(project_root / name, source / name)
    for package in _PROJECT_PACKAGES:
        if (project_root / package).is_dir():
            shutil.copytree(
                project_root / package, source / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
    return source


def _install_project(
    env: Path, *, project_root: Path, source_hash: str, requirements: Path, log_file: Path, log: Log
) -> None:
    started = time.monotonic()
    stamp = env / PROJECT_STAMP
    stamp.unlink(missing_ok=True)  # a reinstall killed half way is redone next time
    python = str(env / "bin" / "python")
    with tempfile.TemporaryDirectory(prefix="agl-tinker-src-") as tmp:
        source = _copy_project(project_root, Path(tmp))
        _run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--force-reinstall",
                "--no-build-isolation",
                str(source),
            ],
            what="installing agl-tinker into the environment",
            requirements=requirements,
            log_file=log_file,
        )
    # The runner part must import there (it is what runner processes start with); seconds, once per install.
    _run(
        [python, "-c", "import adapters.runner.processes"],
        what="importing adapters.runner.processes in the environment",
        requirements=requirements,
        log_file=log_file,
        cwd=Path(tempfile.gettempdir()),
    )
    stamp.write_text(source_hash + "\n")
    log(f"agent-env: installed agl-tinker into {env} in {time.monotonic() - started:.1f} s")


def ensure_agent_env(
    requirements: Path | str,
    *,
    cache_dir: Path | None = None,
    python: str | None = None,
    project_root: Path = PROJECT_ROOT,
    runner_requirements: Path | None = None,
    log: Log | None = None,
) -> AgentEnv:
    """The environment for ``requirements``, built or updated as needed (see the module's docstring)."""
    requirements = Path(requirements).expanduser().resolve()
    if not requirements.is_file():
        raise AgentEnvError(f"no requirements file {requirements}")
    runner_requirements = runner_requirements or project_root / "scripts" / "runner-requirements.txt"
    if not (project_root / "pyproject.toml").is_file() or not runner_requirements.is_file():
        raise AgentEnvError(
            f"cannot build the agent environment for {requirements}: {project_root} is not an agl-tinker checkout "
            f"(no pyproject.toml or {runner_requirements.name})"
        )
    say: Log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    python = python or base_python()
    version = python_version(python)
    key = env_key(requirements, runner_requirements, version)
    envs = (cache_dir or cache_root()) / "agent-envs"
    env = envs / f"{env_name(requirements)}-{key}"
    log_file = envs / f"{env.name}.log"
    with _locked(envs / f"{env.name}.lock", say):
        built = False
        if not (env / ENV_STAMP).is_file():
            _build_env(
                env,
                python=python,
                requirements=requirements,
                runner_requirements=runner_requirements,
                key=key,
                version=version,
                log_file=log_file,
                log=say,
            )
            built = True
        source_hash = project_hash(project_root)
        stamp = env / PROJECT_STAMP
        installed = False
        if not stamp.is_file() or stamp.read_text().strip() != source_hash:
            _install_project(
                env,
                project_root=project_root,
                source_hash=source_hash,
                requirements=requirements,
                log_file=log_file,
                log=say,
            )
            installed = True
    return AgentEnv(path=env, python=env / "bin" / "python", built=built, project_installed=installed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="agent-env",
        description="Build (once, cached) an agent's own Python environment; print its Python on the last line.",
    )
    parser.add_argument("requirements", help="the agent's requirements file")
    parser.add_argument("--python", help=f"the interpreter to make it from (default: ${BASE_PYTHON_ENV} or this one's)")
    args = parser.parse_args(argv)
    try:
        env = ensure_agent_env(args.requirements, python=args.python)
    except AgentEnvError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(env.python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
