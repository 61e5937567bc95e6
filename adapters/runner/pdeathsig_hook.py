"""A start-up hook for an agent's environment: the processes an interpreter forks die with it, however it ends.

Agent-lightning's execution strategies fork their runner processes (``multiprocessing``'s ``fork``) and stop
them only on ``KeyboardInterrupt``: a SIGTERM or SIGKILL of an unmodified ``agl.Trainer`` script left them
running. ``install_startup_hook(site_packages)`` writes this module into an environment's ``site-packages``
with a ``.pth`` file that imports it, so every interpreter of that environment arms at start: each process it
forks from its main thread asks the kernel for ``SIGKILL`` when the interpreter ends (``PR_SET_PDEATHSIG``).

Only the interpreter's direct children are armed (a daemon's double fork still detaches its grandchild), and
only forks made from its main thread: the kernel signals when the forking *thread* ends, so a fork from a
short-lived worker thread would die early. ``subprocess`` does not run fork hooks, so the programs an agent
starts keep their own rules. Standard library only, and nothing but the hook's registration at import: it runs
before any user code, in every interpreter of the environment. Off Linux it does nothing.
"""

from __future__ import annotations

import _thread
import os
import shutil
import sys
from pathlib import Path

HOOK_MODULE = "_agl_tinker_pdeathsig"
"""The module's name in an environment's ``site-packages`` (private: nothing imports it but its ``.pth``)."""
PTH_FILE = "_agl_tinker_pdeathsig.pth"
PR_SET_PDEATHSIG = 1
SIGKILL = 9

_state: dict[str, int | bool] = {}


def _before_fork() -> None:
    _state["from_main"] = _thread.get_ident() == _state.get("main_thread")


def _in_child() -> None:
    if not _state.pop("from_main", False) or os.getppid() != _state.get("pid"):
        return
    import ctypes  # only in a child armed now: the start-up path stays light

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != _state.get("pid"):  # the parent ended before the request: nothing would signal us
        os._exit(0)


def arm() -> None:
    """Register the hooks in this interpreter (idempotent); the children it forks from now on end with it."""
    if not sys.platform.startswith("linux") or _state.get("pid") == os.getpid():
        return
    _state.update(pid=os.getpid(), main_thread=_thread.get_ident())
    if not _state.get("registered"):
        os.register_at_fork(before=_before_fork, after_in_child=_in_child)
        _state["registered"] = True


def install_startup_hook(site_packages: Path) -> Path:
    """Make every interpreter of the environment whose ``site-packages`` this is run ``arm`` at start.

    Copies this module there as ``HOOK_MODULE`` (the environment needs nothing else of this project for it)
    and writes ``PTH_FILE``, which ``site`` executes at every start. Returns the ``.pth`` file's path.
    """
    site_packages.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(__file__), site_packages / f"{HOOK_MODULE}.py")
    pth = site_packages / PTH_FILE
    pth.write_text(f"import {HOOK_MODULE}; {HOOK_MODULE}.arm()\n", encoding="utf-8")
    return pth
