"""``agl-server`` and a local ``agl-controller``, started from the 1.x environment for one run and stopped with it.

The server holds the run's rollouts (in memory: a restart loses them, and the store adapter counts them
lost). The controller, in local mode, starts one agent process per queued rollout with the URLs it builds
from ``agl_server.agent_url``, here the trainer's policy endpoint, so every call and reward event reaches the
endpoint with its rollout id. One key for all (1.x has one): it reaches both processes in their environment
(``AGL_KEY``, read through Hydra's ``${oc.env:AGL_KEY}``), never their command lines, and the controller
hands it to each agent as ``AGL_KEY``.

Neither outlives the trainer: both start with ``AGL_TINKER_DIE_WITH_PARENT=1``, which the environment's
start-up hook (``die_with_parent_hook``) turns into ``SIGKILL`` when their parent ends, and the agents inherit
it from the controller. ``stop`` ends the controller first (on SIGTERM it kills its agents' process groups
and fails their rollouts), then the server. Their output goes to ``<log_dir>/agl1-{server,controller}.log``.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from adapters.agl1.environment import Agl1Env

DIE_WITH_PARENT = {"AGL_TINKER_DIE_WITH_PARENT": "1"}
KEY_OVERRIDE = "${oc.env:AGL_KEY}"
_STOP_WAIT_S = 10.0
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt): ")
"""The last line of a Python traceback (an agent's error, as its process printed it into the controller's log)."""


class Agl1StartError(RuntimeError):
    """A 1.x process did not start; the message names it and the end of its log."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


@dataclass
class _Process:
    name: str
    args: Sequence[str]
    env: dict[str, str]
    log: Path
    cwd: Path | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                list(self.args), env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )

    @property
    def exitcode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def stop(self) -> None:
        popen, self.popen = self.popen, None
        if popen is None or popen.poll() is not None:
            return
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()


def _environment(key: str, pythonpath: Sequence[str] = ()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(DIE_WITH_PARENT, AGL_KEY=key)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    return env


def _hydra(log_dir: Path, name: str) -> list[str]:
    return [f"hydra.run.dir={log_dir / name}", "hydra.output_subdir=null"]


class Agl1Server:
    """``agl-server`` on ``host:port`` (a free port by default), with ``key``."""

    def __init__(self, env: Agl1Env, key: str, log_dir: Path, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.host, self.port = host, port or free_port(host)
        args = [
            str(env.server),
            f"host={host}",
            f"port={self.port}",
            f"key={KEY_OVERRIDE}",
            *_hydra(log_dir, "agl1-server"),
        ]
        self._process = _Process("agl-server", args, _environment(key), log_dir / "agl1-server.log")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def exitcode(self) -> int | None:
        return self._process.exitcode

    def start(self, timeout_s: float = 60.0) -> str:
        """Start it and wait for ``/healthz``; returns its URL."""
        self._process.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.exitcode is not None:
                raise Agl1StartError(
                    f"agl-server exited with code {self._process.exitcode}: {_tail(self._process.log)}"
                )
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise Agl1StartError(f"agl-server did not answer {self.url}/healthz in {timeout_s:.0f}s")

    def stop(self) -> None:
        self._process.stop()


class Agl1Controller:
    """A local ``agl-controller``: one agent process per rollout, at most ``max_agents`` at once.

    The rollout loop's runner pool (``ports.runner_pool.RunnerPool``): 1.x names no worker per rollout, so no
    rollout is ended by a worker's death; the controller's own exit gives the run up.
    """

    def __init__(
        self,
        env: Agl1Env,
        key: str,
        log_dir: Path,
        *,
        server_url: str,
        agent_url: str,
        max_agents: int = 16,
        poll_interval_s: float = 0.5,
        pythonpath: Sequence[str] = (),
        cwd: Path | None = None,
    ) -> None:
        args = [
            str(env.controller),
            "runner_type=local",
            f"agl_server.url={server_url}",
            f"agl_server.agent_url={agent_url}",
            f"agl_server.key={KEY_OVERRIDE}",
            f"local_runner.maximum_size={max_agents}",
            f"local_runner.poll_interval={poll_interval_s}",
            *_hydra(log_dir, "agl1-controller"),
        ]
        self._process = _Process(
            "agl-controller", args, _environment(key, pythonpath), log_dir / "agl1-controller.log", cwd
        )
        self._stopping = False

    def start(self) -> None:
        self._process.start()

    def stop(self) -> None:
        self._stopping = True
        self._process.stop()

    @property
    def alive(self) -> int:
        return 1 if self._process.exitcode is None and self._process.popen is not None else 0

    @property
    def given_up(self) -> bool:
        return not self._stopping and self._process.popen is not None and self._process.exitcode is not None

    def describe(self) -> str:
        code = self._process.exitcode
        state = "running" if code is None else f"exited with code {code}"
        return f"agl-controller {state}; its log: {self._process.log}: {_tail(self._process.log)}"

    def first_error(self) -> str | None:
        try:
            lines = self._process.log.read_text(errors="replace").splitlines()
        except OSError:
            return None
        found = next((line.strip() for line in lines if _EXCEPTION.match(line.strip())), None)
        return f"agl-controller's log ({self._process.log}): {found}" if found else None

    def dead_workers(self) -> Collection[str]:
        return ()

    def restart(self, worker_id: str) -> None:
        """Nothing to restart per rollout: the controller fails a hung agent at its rollout's timeout."""
