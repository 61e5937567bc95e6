"""Where a runner or store process starts: tied to its parent's life before anything heavy is imported.

A runner imports Agent-lightning, LiteLLM and the user's agent, which takes seconds (more under
load); a parent killed meanwhile must not leave it running. So the process's entry point lives in
this module, which imports only the standard library: it asks the kernel for ``SIGKILL`` when the
parent goes (``PR_SET_PDEATHSIG``, Linux), checks the parent is still the one that started it (it may
have died before the request), and only then imports the runner. The polling watch in
``adapters.runner.processes`` stays as the fallback where ``prctl`` is unavailable.

Runner processes are started as ``<python> -m adapters.runner.entry <fd>`` under any interpreter that
has Agent-lightning and this project's runner part (the trainer's own, or an agent's environment whose
framework cannot share the trainer's dependencies). Their settings, store token included, arrive as
one JSON line on the pipe ``fd``, so no secret reaches the command line or the environment; the same
pipe then carries ``stop`` (finish the rollouts in flight and exit), and its end of file (the parent
closed it or is gone) means the same (``adapters.runner.protocol``: the module's name, the pipe's format).

The kernel sends the signal when the *thread* that spawned the process exits, so runner processes are
spawned from threads that live as long as the pool (the caller's, or the pool's supervisor).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from typing import Any

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> bool:
    """Ask the kernel to kill this process when its parent dies; exit at once if it already has.

    Returns whether the kernel took the request (False off Linux or without ``prctl``).
    """
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent_pid:  # the parent died before the request: nothing would ever signal us
        os._exit(0)
    return armed


_tied_to: int | None = None


def end_forked_children_with_this_process() -> None:
    """Every process this one forks from now on gets ``SIGKILL`` when this one ends, however it ends.

    For runner processes that others start: Agent-lightning's execution strategies fork theirs and
    stop them only on ``KeyboardInterrupt``, so a SIGTERM (or SIGKILL) of their parent left them
    running. Only this process's direct children are armed (a child's own forks keep their own rules).
    Idempotent; ``fork`` start method only (a spawned child runs its own entry point).
    """
    global _tied_to
    if _tied_to == os.getpid():
        return
    _tied_to = parent = os.getpid()

    def arm() -> None:
        if os.getppid() == parent:
            die_with_parent(parent)

    os.register_at_fork(after_in_child=arm)


def runner_main(control_fd: int, *, report_fd: int | None = None, parent_pid: int | None = None) -> None:
    """A runner process: settings from the control pipe, then ``adapters.runner.processes.run_runner_process``.

    A runner forked by ``adapters.runner.fork_server`` is told its report pipe and its parent (the fork server,
    not the trainer that wrote the settings) here: they override the settings' own."""
    os.set_inheritable(control_fd, False)  # the agent's own subprocesses must not hold the pipe open
    control = os.fdopen(control_fd, "r", encoding="utf-8")
    settings: dict[str, Any] = json.loads(control.readline() or "{}")
    if settings and report_fd is not None:
        settings["report_fd"] = report_fd
    if settings and parent_pid is not None:
        settings["parent_pid"] = parent_pid
    parent_pid = settings.get("parent_pid")
    if not isinstance(parent_pid, int):
        sys.exit("agl-tinker runner: no settings on the control pipe (start runners through RunnerProcesses)")
    die_with_parent(parent_pid)
    for entry in settings.get("sys_path", ()):  # the parent's import path, when it is the same interpreter
        if entry not in sys.path:
            sys.path.append(entry)
    from adapters.runner.processes import run_runner_process

    run_runner_process(settings, control)


def store_main(parent_pid: int, host: str, port: int, token: str) -> None:
    """The spawn target of a store process (see ``adapters.agl.store_process.StoreProcess``)."""
    die_with_parent(parent_pid)
    from adapters.agl.server import serve_store_process

    serve_store_process(host, port, token)


if __name__ == "__main__":
    runner_main(int(sys.argv[1]))
