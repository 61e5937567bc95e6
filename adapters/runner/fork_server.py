"""The runners' fork server: a process that imports the runner once and forks runner processes from itself.

Started by a trainer (``adapters.runner.forks``) as ``python -m adapters.runner.fork_server <socket fd> <trainer
pid>``, it ties itself to the trainer's life (``PR_SET_PDEATHSIG``, and a poll of its parent), imports
``adapters.runner.processes``, then serves requests on the socket, one JSON object a packet: ``{"spawn": id,
"cwd": ..., "env": {...}}`` with four descriptors (control pipe, report pipe, stdout, stderr) forks a runner and
answers ``{"spawned": id, "pid": pid}``; ``{"kill": id}`` kills one; and when a child ends the server sends
``{"exited": id, "code": code}`` (negative for a signal, as ``multiprocessing`` says).

A forked runner starts as ``Popen`` would start it: a session of its own, stdin ``/dev/null``, the request's
working directory, environment, stdout and stderr, its control and report pipes; then it runs
``adapters.runner.entry.runner_main`` as a spawned runner does, tied to this server's life. Standard library only
until the server is tied to its parent.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import sys
import traceback
from typing import Any

from adapters.runner.protocol import FORK_PACKET_BYTES, FORK_REQUEST_FDS

_PR_SET_NAME = 15
_PARENT_POLL_S = 0.5


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
            packet, fds, _flags, _address = socket.recv_fds(sock, FORK_PACKET_BYTES, FORK_REQUEST_FDS)
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
