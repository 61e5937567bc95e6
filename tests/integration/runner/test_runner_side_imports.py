"""What a runner script in an agent's own environment imports needs nothing the trainer alone has."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HANG_S = 300.0
"""Only catches a hang: the import pulls Agent-lightning (seconds)."""
TRAINER_ONLY = ("returns", "tinker", "tinker_cookbook", "torch", "transformers")
"""Packages an agent's environment does not have (``scripts/agent-env.sh`` installs this project --no-deps)."""


def test_end_forked_children_with_this_process_imports_from_the_documented_path_without_the_trainer() -> None:
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in TRAINER_ONLY)  # None: importing it fails
    script = (
        f"import sys; {blocked}\n"
        "from app.faces.agl_algorithm import end_forked_children_with_this_process, Tinker\n"
        "end_forked_children_with_this_process()\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=HANG_S,
        env={"PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")
