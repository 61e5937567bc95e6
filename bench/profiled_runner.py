"""A runner process under cProfile, switched by ``SIGUSR1``: the first signal starts it, the next writes the stats.

Benchmarks start it as a runner interpreter (``RunnerProcesses(python=<a script that execs this file>)``):
it is called with ``-m adapters.runner.entry <fd>`` and runs that module. Only the runner's main thread
(its event loop, where async agents run) is profiled, and only between the two signals, so start-up and
imports stay out. The stats go to ``$AGL_BENCH_RUNNER_PROFILE.<pid>``.
"""

from __future__ import annotations

import cProfile
import os
import runpy
import signal
import sys
from pathlib import Path
from types import FrameType

ENV = "AGL_BENCH_RUNNER_PROFILE"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_profile = cProfile.Profile()
_on = False


def _toggle(signum: int, frame: FrameType | None) -> None:
    global _on
    if not _on:
        _profile.enable()
        _on = True
        return
    _profile.disable()
    _on = False
    _profile.dump_stats(f"{os.environ[ENV]}.{os.getpid()}")


def wrapper_script(directory: Path) -> Path:
    """An executable that runs this file with this interpreter (what ``RunnerProcesses(python=...)`` takes)."""
    script = directory / "profiled-python"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n')
    script.chmod(0o755)
    return script


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, _toggle)
    sys.argv = ["adapters.runner.entry", sys.argv[-1]]
    runpy.run_module("adapters.runner.entry", run_name="__main__", alter_sys=True)
