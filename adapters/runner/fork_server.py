"""A process that imports the runner's modules once and forks runner processes of this interpreter from itself.

A runner process started as ``python -m adapters.runner.entry`` spends 6-8 s of CPU importing Agent-lightning
(LiteLLM and its proxy server among it) before it runs an agent: at every start and every respawn of a dead or
hung runner. The fork server pays that once: it is started as ``python -m adapters.runner.fork_server``, ties
itself to the trainer's life, imports ``adapters.runner.processes`` and then forks each runner from that state,
which starts in milliseconds plus the agent module's own import.

A forked runner starts as ``Popen`` would start it: in a session of its own, stdin ``/dev/null``, the trainer's
current working directory, environment, stdout and stderr (each request carries them), and its control and
error-report pipes. It then runs ``adapters.runner.entry.runner_main`` as a spawned runner does, tied to the
fork server's life, which is tied to the trainer's (``PR_SET_PDEATHSIG`` on both, and a poll of the parent).

The trainer and the server talk over a Unix ``SOCK_SEQPACKET`` pair, one JSON object a packet: the trainer sends
``{"spawn": id, "cwd": ..., "env": {...}}`` with four descriptors (control pipe, report pipe, stdout, stderr) or
``{"kill": id}``; the server answers ``{"spawned": id, "pid": pid}`` and, when a child ends, ``{"exited": id,
"code": code}`` (negative for a signal, as ``multiprocessing`` says). Only the server reaps and kills its
children, so a pid is never signalled after it could have been reused.

This module imports only the standard library at the top: the server's side imports the runner once it is tied to
its parent; the trainer's side (``ForkServer``) needs nothing more.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

FORK_SERVER_MODULE = "adapters.runner.fork_server"
DISABLE_ENV = "AGL_TINKER_RUNNER_FORK"
"""``0`` starts every runner process as its own interpreter (the slow way) instead of forking it."""
_PACKET = 1 << 20
_PR_SET_NAME = 15
_FDS = 4
_PARENT_POLL_S = 0.5
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
        self._exited = threading.Event()
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
            self._exited.set()

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
                packet = self._socket.recv(_PACKET)
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
    if not sys.platform.startswith("linux") or os.environ.get(DISABLE_ENV, "1") == "0":
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


def _tie_to(parent_pid: int) -> None:
    from adapters.runner.entry import die_with_parent

    die_with_parent(parent_pid)


def _serve(sock: socket.socket, parent_pid: int) -> None:
    """The server's loop: fork on request, reap children and report their ends, exit with the trainer."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, int] = {}  # pid -> id

    def send(message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            sock.send(json.dumps(message).encode())

    while True:
        ready, _, _ = select.select([sock.fileno(), wake_read], [], [], _PARENT_POLL_S)
        if os.getppid() != parent_pid:
            os._exit(0)  # the trainer is gone; the kernel ends our children with us
        if wake_read in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_read, 512):
                    pass
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in children:
                send({"exited": children.pop(pid), "code": os.waitstatus_to_exitcode(status)})
        if sock.fileno() not in ready:
            continue
        try:
            packet, fds, _flags, _address = socket.recv_fds(sock, _PACKET, _FDS)
        except OSError:
            os._exit(0)
        if not packet:
            os._exit(0)  # the trainer closed the server
        request = json.loads(packet)
        if "kill" in request:
            for pid, child in children.items():
                if child == request["kill"]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            continue
        pid = os.fork()
        if pid == 0:
            _become_runner(sock, (wake_read, wake_write), fds, request)
        for fd in fds:
            os.close(fd)
        children[pid] = int(request["spawn"])
        send({"spawned": request["spawn"], "pid": pid})


def _name_this_process(name: bytes) -> None:
    """What ``ps -o comm`` and ``top`` show (the command line stays the fork server's)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, ctypes.c_char_p(name[:15]), 0, 0, 0)


def _become_runner(sock: socket.socket, wake: tuple[int, int], fds: list[int], request: dict[str, Any]) -> None:
    """In a forked child: set up as ``Popen`` would have, then run the runner; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        for fd in wake:
            os.close(fd)
        control_fd, report_fd, stdout_fd, stderr_fd = fds
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        os.close(stdout_fd)
        os.close(stderr_fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.setsid()
        _name_this_process(b"agl-runner")
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        from adapters.runner.entry import runner_main

        runner_main(control_fd, report_fd=report_fd, parent_pid=os.getppid())
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, int | None):
            print(stop.code, file=sys.stderr)
    except BaseException:  # a runner's crash is its exit code, as for a spawned one
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def main(sock_fd: int, parent_pid: int) -> None:
    _tie_to(parent_pid)
    sock = socket.socket(fileno=sock_fd)
    os.set_inheritable(sock_fd, False)
    import adapters.runner.processes  # noqa: F401  # the imports every runner would otherwise pay for

    _serve(sock, parent_pid)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
