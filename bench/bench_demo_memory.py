"""The trainer's RSS over a long demo (`agl-tinker train`, 300 batches of 80 rollouts), forgetting vs keeping rollouts.

Runs the CLI twice, ``keep_rollouts=false`` (the default) then ``true``, samples the trainer process's
RSS every second with the number of batches its ``metrics.jsonl`` holds, and prints the least-squares
slope of RSS over rollouts from batch 30 to the last batch logged (the exit is left out). The demo runs
``n_epochs`` batches (one batch an epoch); ``n_epochs=100`` or any other override goes after the options.

    .venv/bin/python bench/bench_demo_memory.py [key=value ...]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_soak import slope_kib_per_rollout

ROOT = Path(__file__).resolve().parents[1]
FROM_ROLLOUT = 30 * 80


def run(keep: bool, overrides: list[str]) -> str:
    log_path = Path(tempfile.mkdtemp(prefix="bench-demo-memory-")) / "run"
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", TINKER_TELEMETRY="0")
    keeping = f"keep_rollouts={str(keep).lower()}"
    command = [str(ROOT / ".venv/bin/agl-tinker"), "train", f"log_path={log_path}", keeping]
    child = subprocess.Popen([*command, *overrides], env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    trainer = psutil.Process(child.pid)
    points: list[tuple[int, float]] = []
    while child.poll() is None:
        time.sleep(1)
        try:
            rss = trainer.memory_info().rss / 2**20
        except psutil.Error:
            break
        metrics = log_path / "metrics.jsonl"
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        batches = sum(1 for line in lines if '"progress/batch"' in line)
        if rss > 100:  # not while the process is exiting
            points.append((batches * 80, rss))
    last = max(x for x, _ in points)
    measured = [(x, y) for x, y in points if FROM_ROLLOUT <= x < last]
    return (
        f"keep_rollouts={str(keep).lower():<5} exit {child.wait()}: RSS {measured[0][1]:.0f} MiB after "
        f"{measured[0][0]} rollouts -> {measured[-1][1]:.0f} MiB after {measured[-1][0]}; "
        f"{slope_kib_per_rollout(measured):.2f} KiB per rollout"
    )


if __name__ == "__main__":
    overrides = ["n_epochs=300", *sys.argv[1:]]
    for keep in (False, True):
        print(run(keep, overrides), flush=True)
