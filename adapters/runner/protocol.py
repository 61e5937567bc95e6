"""How a parent and its runner processes talk: the module they start as, the control pipe's format and command,
and the fork server's module and socket.

Standard library only, and importing nothing of the project: ``adapters.runner.processes`` (the parent's
side, which starts ``python -m RUNNER_MODULE``), ``adapters.runner.entry`` (the module started, which then
imports the runner) and the environment probe (``adapters.runner.probe``, in an agent's own environment)
share these without importing each other.
"""

from __future__ import annotations

RUNNER_MODULE = "adapters.runner.entry"
"""What runner processes run: ``<python> -m RUNNER_MODULE <fd>``."""
RUNNER_PROTOCOL = 2
"""The control pipe's format; an environment whose installed runner part says otherwise needs reinstalling."""
STOP = "stop"
"""The control pipe's one command after the settings line."""
FORK_SERVER_MODULE = "adapters.runner.fork_server"
"""What a trainer's fork server runs: ``<python> -m FORK_SERVER_MODULE <socket fd> <trainer pid>``."""
FORK_PACKET_BYTES = 1 << 20
"""The largest request or answer on a fork server's socket (one JSON object a packet)."""
FORK_REQUEST_FDS = 4
"""Descriptors a spawn request carries: the control pipe's read end, the report pipe's write end, stdout, stderr."""
FORK_ENV = "AGL_TINKER_RUNNER_FORK"
"""``0`` starts every runner process as its own interpreter (the slow way) instead of forking it."""
