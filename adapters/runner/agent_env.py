"""A Python environment of its own for an agent whose framework conflicts with the trainer's lock.

AutoGen 0.7.5 needs ``protobuf~=5.29`` and ``mcp<2``, CrewAI needs ``jiter<0.15``: neither installs
beside the trainer's locked versions. Such an agent runs in its own virtual environment, built once
by ``uv`` from a requirements file, and the run starts its runner processes with that environment's
Python (``runner_python=...``). The environment holds the agent's requirements, what the runner part
needs (``scripts/runner-requirements.txt``: agentlightning 0.3.0, no torch, tinker or tinker-cookbook)
and this project, installed without dependencies and not editable, so ``python -m adapters.runner.entry``
works there.

Two layers, under ``${AGL_TINKER_CACHE:-~/.cache/agl-tinker}/agent-envs/`` (downloads in uv's own cache):

- the environment ``<name>-<key>/``, keyed on the requirements file (and the files it includes), the
  runner requirements and the Python version: only a changed key builds a new one;
- this project inside it, stamped with a hash of ``adapters/`` and ``pyproject.toml``: a code change
  reinstalls only the project (``--no-deps --offline``, seconds).

A build holds a file lock (two processes asking for one environment build it once) and happens in a
temporary directory renamed into place when complete (``uv venv --relocatable``: its scripts find their
interpreter relative to themselves), so a killed build never leaves a half environment taken for ready.

Standard library only at import: ``scripts/agent-env.sh`` may run it with a bare ``python3``; uv is
found beside this interpreter (the ``uv`` package), else on ``PATH``.
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
from adapters.runner.pdeathsig_hook import install_startup_hook

BASE_PYTHON_ENV = "AGL_TINKER_AGENT_PYTHON"
"""Overrides the interpreter the environments are made from (default: this one's base interpreter)."""
PROJECT_ROOT = Path(__file__).resolve().parents[2]
RUNNER_REQUIREMENTS = PROJECT_ROOT / "scripts" / "runner-requirements.txt"
ENV_STAMP = "agl-tinker-env.json"
PROJECT_STAMP = "agl-tinker-project.sha256"
ENV_EXTRAS = ("pip", "setuptools>=77")
"""pip, so ``python -m pip`` works there (the probe's fixes say it); setuptools, to build this project offline."""
_PROJECT_PACKAGES = ("domain", "ports", "adapters", "app")
_PROJECT_FILES = ("pyproject.toml", "README.md")
_INCLUDE = re.compile(r"^\s*(?:-r|-c|--requirement|--constraint)(?:\s*=\s*|\s+)(\S+)")

Log = Callable[[str], None]


class AgentEnvError(RuntimeError):
    """The environment could not be built; the message is one line naming the requirements file."""


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


def find_uv() -> str:
    """uv's binary: the ``uv`` package's (the trainer's dependency), else one on ``PATH``."""
    try:
        from uv import find_uv_bin  # imported here: the module stays importable without it

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
    if found is None:
        raise AgentEnvError("uv not found (pip install uv, or put it on PATH)")
    return found


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
        if match and (included := (path.parent / match.group(1)).resolve()).is_file():
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


def _error_summary(output: str) -> str:
    """uv's ``error:`` line with its ``cause:`` and ``hint:`` lines, as one line (else the last lines)."""
    lines = [" ".join(line.split()) for line in output.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if line.startswith("error:")), max(len(lines) - 3, 0))
    summary = " ".join(lines[start:]).removeprefix("error: ").replace(" cause: ", ": ")
    return summary[:2000].rstrip(".") or "(no output)"


def _runner_conflicts(output: str, runner_requirements: Path) -> str:
    """Which of the runner requirements uv's error names: a conflict there is not the agent's file."""
    text = "".join(output.split()).lower()
    named = [
        spec
        for line in runner_requirements.read_text().splitlines()
        if (spec := "".join(line.split("#")[0].split())) and spec.lower() in text
    ]
    return f"; {', '.join(named)} comes from {runner_requirements}" if named else ""


def _run(
    args: Sequence[str],
    *,
    what: str,
    requirements: Path,
    log_file: Path,
    cwd: Path | None = None,
    runner_requirements: Path | None = None,
) -> None:
    """One build step, its output appended to ``log_file``; a non-zero exit becomes one ``AgentEnvError`` line."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # the import check: no cost-map download
    result = subprocess.run(list(args), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with log_file.open("a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(args)}\n{result.stdout}")
    if result.returncode != 0:
        origin = _runner_conflicts(result.stdout, runner_requirements) if runner_requirements else ""
        raise AgentEnvError(
            f"cannot build the agent environment for {requirements}: {what} failed (exit {result.returncode}): "
            f"{_error_summary(result.stdout)}{origin} (full log: {log_file})"
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


def _build_env(env: Path, *, uv: str, python: str, requirements: Path, runner_requirements: Path, log: Log) -> None:
    """Build the environment in a temporary directory beside ``env`` and rename it into place."""
    for stale in env.parent.glob(f"{env.name}.tmp-*"):  # a build killed earlier (we hold the lock)
        shutil.rmtree(stale, ignore_errors=True)
    if env.exists():  # no stamp: not a finished environment
        shutil.rmtree(env)
    tmp = Path(tempfile.mkdtemp(prefix=f"{env.name}.tmp-", dir=env.parent))
    log_file = env.parent / f"{env.name}.log"
    log_file.write_text("")
    step = {"requirements": requirements, "log_file": log_file}
    started = time.monotonic()
    try:
        log(f"agent-env: building {env} from {requirements} (once; uv, about a minute)")
        _run([uv, "venv", "--quiet", "--relocatable", "--python", python, str(tmp)], what="uv venv", **step)
        reqs = ["-r", str(requirements), "-r", str(runner_requirements), *ENV_EXTRAS]
        _run(
            [uv, "pip", "install", "--compile-bytecode", "--python", str(tmp / "bin" / "python"), *reqs],
            what="uv pip install",
            cwd=requirements.parent,  # relative paths in the file are the user's, next to it
            runner_requirements=runner_requirements,
            **step,
        )
        build_s = round(time.monotonic() - started, 1)
        stamp = {"requirements": str(requirements), "runner_requirements": str(runner_requirements)}
        (tmp / ENV_STAMP).write_text(json.dumps({**stamp, "python": python, "build_s": build_s}, indent=2) + "\n")
        tmp.chmod(0o755)  # mkdtemp made it private; a venv is not
        tmp.rename(env)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"agent-env: built {env} in {build_s:.0f} s")


def _install_project(env: Path, *, uv: str, project_root: Path, source_hash: str, requirements: Path, log: Log) -> None:
    """This project's current sources into ``env``, from a copy (the build writes nothing into the checkout)."""
    started = time.monotonic()
    stamp = env / PROJECT_STAMP
    stamp.unlink(missing_ok=True)  # a reinstall killed half way is redone next time
    python = str(env / "bin" / "python")
    step = {"requirements": requirements, "log_file": env.parent / f"{env.name}.log"}
    with tempfile.TemporaryDirectory(prefix="agl-tinker-src-") as tmp:
        source = Path(tmp) / "agl-tinker"
        source.mkdir()
        for name in _PROJECT_FILES:
            if (project_root / name).is_file():
                shutil.copy2(project_root / name, source / name)
        for package in _PROJECT_PACKAGES:
            if (project_root / package).is_dir():
                ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
                shutil.copytree(project_root / package, source / package, ignore=ignore)
        install = [uv, "pip", "install", "--python", python, "--offline", "--no-cache", "--no-build-isolation"]
        _run(
            [*install, "--no-deps", "--reinstall", str(source)],
            what="installing agl-tinker into the environment",
            **step,
        )
    # The runner part must import there (it is what runner processes start with); seconds, once per install.
    check = [python, "-c", "import adapters.runner.processes"]
    _run(check, what="importing adapters.runner.processes there", cwd=Path(tempfile.gettempdir()), **step)
    # Every interpreter there arms the processes it forks to die with it (an unmodified agl.Trainer script).
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    install_startup_hook(Path(purelib))
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
    key = env_key(requirements, runner_requirements, python_version(python))
    envs = (cache_dir or cache_root()) / "agent-envs"
    env = envs / f"{env_name(requirements)}-{key}"
    with _locked(envs / f"{env.name}.lock", say):
        built = not (env / ENV_STAMP).is_file()
        source_hash = project_hash(project_root)
        stamp = env / PROJECT_STAMP
        installed = built or not stamp.is_file() or stamp.read_text().strip() != source_hash
        try:
            uv = find_uv() if installed else ""
        except AgentEnvError as error:
            raise AgentEnvError(f"cannot build the agent environment for {requirements}: {error}") from None
        if built:
            _build_env(
                env, uv=uv, python=python, requirements=requirements, runner_requirements=runner_requirements, log=say
            )
        if installed:
            _install_project(
                env, uv=uv, project_root=project_root, source_hash=source_hash, requirements=requirements, log=say
            )
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
