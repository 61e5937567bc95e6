"""Where a runner or store process starts: tied to its parent's life before anything heavy is imported.

A spawned runner imports Agent-lightning, LiteLLM and the user's agent, which takes seconds (more
under load); a parent killed meanwhile must not leave it running. So the process's entry point lives
in this module, which imports only the standard library: it asks the kernel for ``SIGKILL`` when the
parent goes (``PR_SET_PDEATHSIG``, Linux), checks the parent is still the one that spawned it (it may
have died before the request), and only then imports the runner. The polling watch in
``adapters.agl_runners`` stays as the fallback where ``prctl`` is unavailable.

The kernel sends the signal when the *thread* that spawned the process exits, so runner processes are
spawned from threads that live as long as the pool (the caller's, or the pool's supervisor).
"""

from __future__ import annotations

import ctypes
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


def runner_main(parent_pid: int, stop: Any, *args: Any) -> None:
    """The spawn target of a runner process (see ``adapters.agl_runners.RunnerProcesses``)."""
    die_with_parent(parent_pid)
    from adapters.agl_runners import run_runner_process

    run_runner_process(parent_pid, stop, *args)


def store_main(parent_pid: int, host: str, port: int, token: str) -> None:
    """The spawn target of a store process (see ``adapters.store_process.StoreProcess``)."""
    die_with_parent(parent_pid)
    from adapters.store_process import serve_store_process

    serve_store_process(host, port, token)
