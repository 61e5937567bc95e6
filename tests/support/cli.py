"""``agl-tinker`` as its user runs it: a process of its own, from the project's root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "app.faces.cli"]


def cli_env(**extra: str) -> dict[str, str]:
    """This environment for an ``agl-tinker`` process, less the secrets a test passes explicitly."""
    env = {k: v for k, v in os.environ.items() if k not in ("AGL_TINKER_MASTER_KEY", "AGL_TINKER_STORE_TOKEN")}
    return env | {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "TINKER_TELEMETRY": "0"} | extra


def cli(*args: str, timeout: float = 2 * HANG_S, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``agl-tinker ARGS`` run to its end (``timeout`` only catches a hang), its output captured."""
    return subprocess.run(
        [*COMMAND, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env or cli_env()
    )


def cli_process(*args: str, env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen[str]:
    """``agl-tinker ARGS`` started in the background."""
    return subprocess.Popen([*COMMAND, *args], cwd=ROOT, env=env or cli_env(), text=True, **popen)
