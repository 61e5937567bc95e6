"""The trainer's side of the runners' fork server (``adapters.runner.fork_server``): start it, ask it for runners.

A runner process started as ``python -m adapters.runner.entry`` spends 6-8 s of CPU importing Agent-lightning
before it runs an agent, at every start and every respawn. ``shared_fork_server`` starts, once per trainer
process and environment, a process that has paid that once and forks each runner from itself (a runner then
starts in milliseconds plus its agent module's own import). ``ForkServer`` is the handle: ``spawn`` a runner on
its pipes, read its ``pid`` and ``exitcode``, ``kill`` it, ``wait`` for it. The server answers on a Unix
``SOCK_SEQPACKET`` pair, one JSON object a packet (the format is in ``adapters.runner.fork_server``); only the
server reaps and kills its children, so a pid is never signalled after it could have been reused.

A server lives as long as the trainer process (as ``multiprocessing``'s own fork server does) and ends with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping

from adapters.runner.protocol import FORK_ENV, FORK_PACKET_BYTES, FORK_SERVER_MODULE

SPAWN_ANSWER_S = 300.0
"""How long ``pid`` waits for the server's answer: its imports take seconds, minutes on a machine under load."""
KILLED = -int(signal.SIGKILL)
"""The exit code of a child the trainer never heard end because its fork server is gone (the kernel killed it)."""


class ForkServer:
    """The trainer's handle on one fork server: ``spawn`` a runner, read its ``exitcode``, ``kill``, ``wait``."""

    def __init__(self, python: str, env: Mapping[str, str]) -> None:
        """Start ``python -m adapters.runner.fork_server`` with ``env``; it imports while the first spawns queue."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._socket = ours
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._next_id = 0
        self._pids: dict[int, int] = {}
        self._codes: dict[int, int] = {}
        self._closed = False
        started = threading.Event()
        failure: list[BaseException] = []

        def keep() -> None:
            # The kernel's parent-death signal follows the thread that spawned the server: this one lives as long
            # as the handle, not as long as whichever pool asked first.
            try:
                self._process = subprocess.Popen(
                    [python, "-m", FORK_SERVER_MODULE, str(theirs.fileno()), str(os.getpid())],
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    env=dict(env),
                )
            except BaseException as error:  # handed to the caller below
                failure.append(error)
                return
            finally:
                theirs.close()
                started.set()
            self._process.wait()

        threading.Thread(target=keep, name="agl-runner-fork-server", daemon=True).start()
        started.wait()
        if failure:
            ours.close()
            raise failure[0]
        threading.Thread(target=self._read, name="agl-runner-fork-server-replies", daemon=True).start()

    @property
    def alive(self) -> bool:
        with self._lock:
            return not self._closed

    @property
    def idle(self) -> bool:
        """Every child it forked has ended."""
        with self._lock:
            return len(self._codes) == self._next_id

    def spawn(self, control_fd: int, report_fd: int, cwd: str, env: Mapping[str, str]) -> int:
        """Ask for a runner on the given pipe ends (the server gets copies; the caller closes its own); returns
        the child's id for ``exitcode``, ``kill`` and ``wait``. Does not wait for the server: a first spawn
        queues while it imports."""
        request = {"cwd": cwd, "env": dict(env)}
        with self._lock:
            child, self._next_id = self._next_id, self._next_id + 1
            if self._closed:
                self._codes[child] = KILLED
                return child
            packet = json.dumps({"spawn": child, **request}).encode()
            with _standard_output() as (stdout, stderr):
                try:
                    socket.send_fds(self._socket, [packet], [control_fd, report_fd, stdout, stderr])
                except OSError:
                    self._codes[child] = KILLED
        return child

    def exitcode(self, child: int) -> int | None:
        with self._lock:
            return self._codes.get(child)

    def pid(self, child: int, timeout: float | None = SPAWN_ANSWER_S) -> int | None:
        """The child's process id, once the server has forked it (waiting up to ``timeout`` for a server still
        importing); ``None`` if it never was (the server is gone)."""
        with self._changed:
            self._changed.wait_for(lambda: child in self._pids or child in self._codes, timeout)
            return self._pids.get(child)

    def kill(self, child: int) -> None:
        with self._lock:
            if child in self._codes or self._closed:
                return
            with contextlib.suppress(OSError):
                self._socket.send(json.dumps({"kill": child}).encode())

    def wait(self, child: int, timeout: float | None = None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: child in self._codes, timeout)
            return self._codes.get(child)

    def close(self) -> None:
        """End the server; the kernel ends its children with it."""
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)

    def _read(self) -> None:
        try:
            while True:
                packet = self._socket.recv(FORK_PACKET_BYTES)
                if not packet:
                    break
                reply = json.loads(packet)
                with self._changed:
                    if "spawned" in reply:
                        self._pids[int(reply["spawned"])] = int(reply["pid"])
                    elif "exited" in reply:
                        self._codes[int(reply["exited"])] = int(reply["code"])
                    self._changed.notify_all()
        except (OSError, ValueError):
            pass
        with self._changed:  # the server is gone, and every child of it (the kernel killed them)
            self._closed = True
            for child in range(self._next_id):
                self._codes.setdefault(child, KILLED)
            self._changed.notify_all()
        with contextlib.suppress(OSError):
            self._socket.close()


@contextlib.contextmanager
def _standard_output() -> Iterator[tuple[int, int]]:
    """This process's file descriptors 1 and 2, as a spawned child would inherit them (``/dev/null`` for one that
    is closed)."""
    opened: list[int] = []
    fds = []
    for fd in (1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            opened.append(os.open(os.devnull, os.O_WRONLY))
            fds.append(opened[-1])
    try:
        yield fds[0], fds[1]
    finally:
        for fd in opened:
            os.close(fd)


_servers: dict[tuple[int, str, frozenset[tuple[str, str]]], ForkServer] = {}
_servers_lock = threading.Lock()


def shared_fork_server(python: str, env: Mapping[str, str]) -> ForkServer | None:
    """This process's fork server for ``python`` under ``env`` (started at the first call), or ``None`` where
    runners cannot be forked (off Linux, or ``AGL_TINKER_RUNNER_FORK=0``).

    A server is kept per environment: what a module reads from the environment at import time is the server's,
    so a runner started under another environment gets a server started under that one."""
    if not sys.platform.startswith("linux") or os.environ.get(FORK_ENV, "1") == "0":
        return None
    key = (os.getpid(), python, frozenset(env.items()))
    with _servers_lock:
        server = _servers.get(key)
        if server is None or not server.alive:
            for other, idle in [(k, s) for k, s in _servers.items() if k != key and s.idle]:
                idle.close()  # one server a process in the usual case; an old environment's, once unused, goes
                del _servers[other]
            server = _servers[key] = ForkServer(python, env)
        return server
