"""The Python 3.12 environment Agent-lightning 1.x runs in: its ``agl-server``, ``agl-controller`` and agents.

agentlightning 1.x needs Python >= 3.12 and shares no package with the trainer (which needs 0.3.0 under
the same name), so it gets a virtual environment of its own, built once by ``uv`` with ``agentlightning==1.0.2``
and the agent's requirements, under ``${AGL_TINKER_CACHE:-~/.cache/agl-tinker}/agl1-envs/<name>-<key>/``,
keyed on the pin, the requirements (and the files they include) and the interpreter: only a changed key
builds a new one (about 36 packages, ~130 MB). The build happens in a temporary directory renamed into
place under a file lock, as ``adapters.runner.agent_env`` does for 0.x agents' environments.

The environment also gets a start-up hook (``die_with_parent_hook``): an interpreter started there with
``AGL_TINKER_DIE_WITH_PARENT=1`` in its environment dies with the process that started it. The run sets it
for the controller, whose agents inherit it, so an agent outlives neither its controller nor the trainer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from adapters.files.cache import cache_root
from adapters.runner.agent_env import (
    AgentEnvError,
    _locked,
    _requirement_texts,
    _run,
    env_name,
    find_uv,
    python_version,
)

AGL1_PIN = "agentlightning==1.0.2"
PYTHON_ENV = "AGL_TINKER_AGL1_PYTHON"
"""Overrides the Python 3.12+ interpreter the environment is made from."""
STAMP = "agl-tinker-agl1-env.json"
HOOK_SOURCE = Path(__file__).with_name("die_with_parent_hook.py")
HOOK_MODULE = "_agl_tinker_die_with_parent"

Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Agl1Env:
    path: Path
    built: bool

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def server(self) -> Path:
        return self.path / "bin" / "agl-server"

    @property
    def controller(self) -> Path:
        return self.path / "bin" / "agl-controller"


def find_python312() -> str | None:
    """A Python >= 3.12: ``$AGL_TINKER_AGL1_PYTHON``, ``python3.12`` on ``PATH`` (pyenv's 3.12.1 too), else None."""
    configured = os.environ.get(PYTHON_ENV, "").strip()
    candidates = [configured] if configured else []
    candidates += ["python3.12", "python3.13"]
    for candidate in candidates:
        env = {**os.environ, "PYENV_VERSION": os.environ.get("PYENV_VERSION", "3.12.1")}
        try:
            out = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info >= (3, 12), sys.executable)"],
                capture_output=True,
                text=True,
                timeout=30,
                env=env,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        ok, _, executable = out.stdout.strip().partition(" ")
        if out.returncode == 0 and ok == "True":
            return executable
    return None


def env_key(requirements: Path | None, version: str) -> str:
    digest = hashlib.sha256()
    texts = [AGL1_PIN.encode(), version.encode(), HOOK_SOURCE.read_bytes()]
    texts += _requirement_texts(requirements) if requirements is not None else []
    for text in texts:
        digest.update(hashlib.sha256(text).digest())
    return digest.hexdigest()[:16]


def ensure_agl1_env(
    requirements: Path | str | None = None,
    *,
    python: str | None = None,
    cache_dir: Path | None = None,
    log: Log | None = None,
) -> Agl1Env:
    """The environment for the agent's ``requirements`` (none: agentlightning alone), built when missing."""
    say: Log = log or (lambda message: print(message, flush=True))
    reqs = Path(requirements).expanduser().resolve() if requirements is not None else None
    if reqs is not None and not reqs.is_file():
        raise AgentEnvError(f"no requirements file {reqs}")
    base = python or find_python312()
    if base is None:
        raise AgentEnvError(f"Agent-lightning 1.x needs Python 3.12 or newer: none found (set {PYTHON_ENV})")
    key = env_key(reqs, python_version(base))
    envs = (cache_dir or cache_root()) / "agl1-envs"
    env = envs / f"{env_name(reqs) if reqs is not None else 'agl1'}-{key}"
    with _locked(envs / f"{env.name}.lock", say):
        if (env / STAMP).is_file():
            return Agl1Env(path=env, built=False)
        _build(env, uv=find_uv(), python=base, requirements=reqs, log=say)
    return Agl1Env(path=env, built=True)


def _build(env: Path, *, uv: str, python: str, requirements: Path | None, log: Log) -> None:
    for stale in env.parent.glob(f"{env.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    if env.exists():
        shutil.rmtree(env)
    tmp = Path(tempfile.mkdtemp(prefix=f"{env.name}.tmp-", dir=env.parent))
    log_file = env.parent / f"{env.name}.log"
    log_file.write_text("")
    what = requirements or Path(AGL1_PIN)
    started = time.monotonic()
    try:
        log(f"agl1-env: building {env} ({AGL1_PIN}{f' and {requirements}' if requirements else ''}; once, uv)")
        _run([uv, "venv", "--quiet", "--relocatable", "--python", python, str(tmp)], what="uv venv", requirements=what,
             log_file=log_file)  # fmt: skip
        reqs = [AGL1_PIN, *(["-r", str(requirements)] if requirements is not None else [])]
        _run(
            [uv, "pip", "install", "--compile-bytecode", "--python", str(tmp / "bin" / "python"), *reqs],
            what="uv pip install",
            requirements=what,
            log_file=log_file,
            cwd=requirements.parent if requirements is not None else None,
        )
        purelib = subprocess.run(
            [str(tmp / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        shutil.copyfile(HOOK_SOURCE, Path(purelib) / f"{HOOK_MODULE}.py")
        (Path(purelib) / f"{HOOK_MODULE}.pth").write_text(f"import {HOOK_MODULE}; {HOOK_MODULE}.arm()\n")
        build_s = round(time.monotonic() - started, 1)
        stamp = {"pin": AGL1_PIN, "requirements": str(requirements), "python": python, "build_s": build_s}
        (tmp / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
        tmp.chmod(0o755)
        tmp.rename(env)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"agl1-env: built {env} in {build_s:.0f} s")
