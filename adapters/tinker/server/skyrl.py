"""A Tinker-API server on this machine: SkyRL 0.4.0's, behind the compatibility proxy.

SkyRL needs Python >= 3.12, so it lives in a virtual environment of its own, apart from the
project's (``$AGL_TINKER_CACHE``, default ``~/.cache/agl-tinker``, reused by every checkout).
Its API process imports torch (``skyrl.tinker.api`` -> ``skyrl/backends/renderer.py``, for image
inputs), and PyPI's Linux torch wheels for Python 3.12 are CUDA builds, so the environment holds
the CUDA torch that ``peft`` pulls (about 6.7 GB) even though the JAX backend runs on the CPU.

``SkyrlServer`` starts the API on 127.0.0.1 (JAX on the CPU, short session timeout, enough adapter
slots) and the proxy in front of it; ``python -m adapters.tinker.server.skyrl`` does the same from a
shell (``scripts/tinker-server.sh``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from adapters.files.cache import cache_root

SKYRL_VERSION = "0.4.0"
REQUIREMENTS = (f"skyrl[tinker,jax]=={SKYRL_VERSION}", "aiohttp", "uv")
"""``aiohttp`` is imported by SkyRL's API but not declared; ``uv`` launches its engine."""
PYTHON_ENV = "AGL_TINKER_PYTHON312"
MAX_LORA_ADAPTERS = 16
MAX_LORA_RANK = 32


class ServerSetupError(RuntimeError):
    """SkyRL could not be installed or started; the message says which step and why."""


def venv_dir() -> Path:
    return cache_root() / f"skyrl-{SKYRL_VERSION}"


def _runs(python: str, env: dict[str, str] | None = None) -> bool:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(sys.version_info >= (3, 12))"],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == "True"


def find_python312() -> str | None:
    """A Python >= 3.12 interpreter: ``$AGL_TINKER_PYTHON312``, ``python3.12`` on PATH, or pyenv's newest 3.12."""
    explicit = os.environ.get(PYTHON_ENV)
    if explicit:
        return explicit if _runs(explicit) else None
    on_path = shutil.which("python3.12")
    if on_path and _runs(on_path):
        return on_path
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return None
    try:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=30).stdout.strip()
        bare = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    versions = sorted(
        (v for v in bare.split() if v.startswith("3.12.") and v.removeprefix("3.12.").isdigit()),
        key=lambda v: int(v.removeprefix("3.12.")),
    )
    for version in reversed(versions):
        candidate = str(Path(root) / "versions" / version / "bin" / "python3.12")
        if _runs(candidate):
            return candidate
    return None


def installed() -> bool:
    return (venv_dir() / ".installed").is_file()


def install(python: str | None = None, *, quiet: bool = True) -> Path:
    """SkyRL's environment, made once (a few minutes, ~6.7 GB) and reused; returns its directory."""
    venv = venv_dir()
    if installed():
        return venv
    python = python or find_python312()
    if python is None:
        raise ServerSetupError(f"SkyRL {SKYRL_VERSION} needs Python >= 3.12: none found (set {PYTHON_ENV})")
    venv.parent.mkdir(parents=True, exist_ok=True)
    if venv.exists():
        shutil.rmtree(venv)  # a half-made environment from an interrupted install
    pip_quiet = ["-qq"] if quiet else []
    steps = (
        [python, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", *pip_quiet, "--upgrade", "pip"],
        [str(venv / "bin" / "python"), "-m", "pip", "install", *pip_quiet, *REQUIREMENTS],
    )
    for step in steps:
        done = subprocess.run(step, capture_output=quiet, text=True)
        if done.returncode != 0:
            tail = (done.stderr or "").strip().splitlines()[-1:] if quiet else []
            raise ServerSetupError(f"installing SkyRL failed at `{' '.join(step[:4])} ...`: {' '.join(tail)}")
    (venv / ".installed").write_text(json.dumps({"skyrl": SKYRL_VERSION, "requirements": REQUIREMENTS}))
    return venv


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(url: str) -> bool:
    """Whether a Tinker API (SkyRL's or the proxy) at ``url`` answers its health check."""
    try:
        with urllib.request.urlopen(f"{url}/api/v1/healthz", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


@dataclass
class SkyrlServer:
    """The SkyRL API (``upstream``) and the proxy in front of it (``url``), both on 127.0.0.1."""

    model_dir: Path
    workdir: Path
    port: int = 0
    """The proxy's port (0: a free one)."""
    session_timeout_s: int = 30
    startup_timeout_s: float = 300.0
    proxy: bool = True

    def __post_init__(self) -> None:
        self.upstream_port = free_port()
        self.port = self.port or free_port()
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def upstream(self) -> str:
        return f"http://127.0.0.1:{self.upstream_port}"

    @property
    def url(self) -> str:
        """What a tinker client points at: the proxy, or SkyRL itself without one."""
        return f"http://127.0.0.1:{self.port}" if self.proxy else self.upstream

    def start(self) -> None:
        venv = venv_dir()
        if not installed():
            raise ServerSetupError(f"SkyRL is not installed in {venv}: run scripts/tinker-server.sh --install-only")
        self.workdir.mkdir(parents=True, exist_ok=True)
        python = venv / "bin" / "python"
        env = {
            **os.environ,
            "UV_NO_SYNC": "1",
            "UV_OFFLINE": "1",
            "JAX_PLATFORMS": "cpu",
            "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        env.pop("VIRTUAL_ENV", None)
        backend = {"max_lora_adapters": MAX_LORA_ADAPTERS, "max_lora_rank": MAX_LORA_RANK}
        api = [
            str(venv / "bin" / "uv"), "run", "--no-project", "--python", str(python),
            "-m", "skyrl.tinker.api", "--host", "127.0.0.1", "--port", str(self.upstream_port),
            "--base-model", str(self.model_dir), "--backend", "jax", "--backend-config", json.dumps(backend),
            "--database-url", f"sqlite:///{self.workdir / 'tinker.db'}",
            "--checkpoints-base", str(self.workdir / "checkpoints"),
            "--session-timeout-sec", str(self.session_timeout_s),
        ]  # fmt: skip
        self._spawn(api, env, self.workdir / "skyrl.log")
        self._wait(self.upstream, "SkyRL's API", self.workdir / "skyrl.log")
        if self.proxy:
            proxy = [sys.executable, "-m", "adapters.tinker.server.compat_proxy", "--upstream", self.upstream,
                     "--port", str(self.port)]  # fmt: skip
            self._spawn(proxy, dict(os.environ), self.workdir / "proxy.log")
            self._wait(self.url, "the compatibility proxy", self.workdir / "proxy.log")

    def _spawn(self, command: Sequence[str], env: dict[str, str], log: Path) -> None:
        with open(log, "ab") as out:
            self._processes.append(
                subprocess.Popen(
                    command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.workdir, start_new_session=True
                )
            )

    def _wait(self, url: str, what: str, log: Path) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if healthy(url):
                return
            if any(p.poll() is not None for p in self._processes):
                break
            time.sleep(0.5)
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.is_file() else []
        self.stop()
        raise ServerSetupError(f"{what} did not come up at {url} (log {log}: {' | '.join(tail)})")

    def stop(self) -> None:
        """Stop the proxy, then SkyRL (its engine runs in SkyRL's process group)."""
        for process in reversed(self._processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self._processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._processes.clear()

    def __enter__(self) -> SkyrlServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


@contextlib.contextmanager
def tiny_model_dir(workdir: Path, seed: int = 0) -> Iterator[Path]:
    """The project's tiny Qwen3 checkpoint (and tokenizer), built offline into ``workdir/model``."""
    from adapters.local import build_tiny_model

    path = workdir / "model"
    if not (path / "config.json").is_file():
        build_tiny_model(path, seed=seed)
    yield path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run SkyRL's Tinker-API server behind the compatibility proxy.")
    parser.add_argument("--install-only", action="store_true", help="install SkyRL (cached) and exit")
    parser.add_argument("--port", type=int, default=8000, help="the port clients use (the proxy's)")
    parser.add_argument("--model", type=Path, help="a Hugging Face model directory (default: the tiny model)")
    parser.add_argument("--workdir", type=Path, help="database, checkpoints and logs (default: a temporary one)")
    parser.add_argument("--no-proxy", action="store_true", help="serve SkyRL alone on --port (to see its gaps)")
    parser.add_argument("--session-timeout", type=int, default=30, help="seconds before an idle session's slots go")
    args = parser.parse_args(argv)
    try:
        install(quiet=True)
        if args.install_only:
            print(f"SkyRL {SKYRL_VERSION} is installed in {venv_dir()}")
            return 0
        workdir = args.workdir or Path(tempfile.mkdtemp(prefix="agl-tinker-server-"))
        with contextlib.ExitStack() as stack:
            model = args.model or stack.enter_context(tiny_model_dir(workdir))
            server = SkyrlServer(
                model.resolve(), workdir.resolve(), port=args.port, session_timeout_s=args.session_timeout,
                proxy=not args.no_proxy,
            )  # fmt: skip
            if args.no_proxy:
                server.upstream_port = args.port
            stack.enter_context(server)
            print(f"Tinker API at {server.url} (SkyRL {SKYRL_VERSION}, base model {model}); logs in {workdir}")
            print(
                f"train with: agl-tinker train policy.backend=tinker policy.base_url={server.url} "
                f"policy.base_model={model} policy.lora_rank={MAX_LORA_RANK} policy.train_unembed=false "
                "kl_penalty_coef=0"
            )
            print("Ctrl-C stops it", flush=True)
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                return 0
    except ServerSetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
