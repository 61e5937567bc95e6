"""The trainer's RSS over a long demo (`agl-tinker train`, 300 batches of 80 rollouts), forgetting vs keeping rollouts.

Runs the CLI twice, ``keep_rollouts=false`` (the default) then ``true``, samples the trainer process's
RSS every second with the number of batches its ``metrics.jsonl`` holds, and prints the least-squares
slope of RSS over rollouts from batch 30 to the last batch logged (the exit is left out). The demo runs
``n_epochs`` batches (one batch an epoch); ``n_epochs=100`` or any other override goes after the options.

    .venv/bin/python bench/bench_demo_memory.py [key=value ...]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_soak import slope_kib_per_rollout

ROOT = Path(__file__).resolve().parents[1]
FROM_ROLLOUT = 30 * 80
ROLLOUTS_PER_BATCH = 80


@dataclass(frozen=True, slots=True)
class DemoMemory:
    keep: bool
    exit_code: int
    first: tuple[int, float]
    """(rollouts done, RSS MiB) at the start of the measured span."""
    last: tuple[int, float]
    kib_per_rollout: float
    rollout_rates: tuple[float, ...]
    """Each batch's ``rollouts/per_s`` (the rollout phase's rate), from the run's metrics."""

    def line(self) -> str:
        return (
            f"keep_rollouts={str(self.keep).lower():<5} exit {self.exit_code}: RSS {self.first[1]:.0f} MiB after "
            f"{self.first[0]} rollouts -> {self.last[1]:.0f} MiB after {self.last[0]}; "
            f"{self.kib_per_rollout:.2f} KiB per rollout"
        )

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rollout_rates) if self.rollout_rates else 0.0


def measure(keep: bool, overrides: list[str], from_rollout: int = FROM_ROLLOUT) -> DemoMemory:
    """One demo run by the CLI; the trainer's RSS slope from ``from_rollout`` to the last batch logged."""
    log_path = Path(tempfile.mkdtemp(prefix="bench-demo-memory-")) / "run"
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", TINKER_TELEMETRY="0")
    keeping = f"keep_rollouts={str(keep).lower()}"
    command = [str(ROOT / ".venv/bin/agl-tinker"), "train", f"log_path={log_path}", keeping]
    child = subprocess.Popen([*command, *overrides], env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    trainer = psutil.Process(child.pid)
    points: list[tuple[int, float]] = []
    metrics = log_path / "metrics.jsonl"
    while child.poll() is None:
        time.sleep(1)
        try:
            rss = trainer.memory_info().rss / 2**20
        except psutil.Error:
            break
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        batches = sum(1 for line in lines if '"progress/batch"' in line)
        if rss > 100:  # not while the process is exiting
            points.append((batches * ROLLOUTS_PER_BATCH, rss))
    exit_code = child.wait()
    last = max(x for x, _ in points)
    measured = [(x, y) for x, y in points if from_rollout <= x < last]
    if len(measured) < 2:
        raise RuntimeError(f"the demo (exit {exit_code}) logged too few batches after rollout {from_rollout}")
    logged = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    rates = tuple(float(m["rollouts/per_s"]) for m in logged if "rollouts/per_s" in m)
    return DemoMemory(keep, exit_code, measured[0], measured[-1], slope_kib_per_rollout(measured), rates)


def run(keep: bool, overrides: list[str]) -> str:
    return measure(keep, overrides).line()


if __name__ == "__main__":
    overrides = ["n_epochs=300", *sys.argv[1:]]
    for keep in (False, True):
        print(run(keep, overrides), flush=True)
