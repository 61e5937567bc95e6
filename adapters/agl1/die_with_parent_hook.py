"""Start-up hook of the Agent-lightning 1.x environment: an interpreter dies with the process that started it.

Copied into the environment's ``site-packages`` with a ``.pth`` file that imports it at every start. It acts
only where ``AGL_TINKER_DIE_WITH_PARENT=1`` is set: the trainer sets it for the ``agl-controller`` it starts,
whose agents inherit it (the controller starts them with ``subprocess``, which runs no fork hook, in sessions
of their own), so each asks the kernel for ``SIGKILL`` when its parent ends (``PR_SET_PDEATHSIG``) and an
agent never outlives its controller. Standard library only; nothing happens off Linux.
"""

from __future__ import annotations

import os
import sys

ENV = "AGL_TINKER_DIE_WITH_PARENT"
PR_SET_PDEATHSIG = 1
SIGKILL = 9


def arm() -> None:
    if os.environ.get(ENV) != "1" or not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if parent == 1 or os.getppid() != parent:  # orphaned before the request: nothing would signal us
        os._exit(0)
