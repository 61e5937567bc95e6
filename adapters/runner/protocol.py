"""How a parent and its runner processes talk: the module they start as, the control pipe's format and command.

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
