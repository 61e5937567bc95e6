"""What a training run leaves in its log directory, as the tests read it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adapters.files.run_log import METRICS_FILE

ROOT = Path(__file__).resolve().parents[2]


def metrics_lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / METRICS_FILE).read_text().splitlines()]


def batch_lines(run: Path) -> list[dict[str, Any]]:
    """The metrics lines of trained batches (not evaluations, not warm starts)."""
    return [m for m in metrics_lines(run) if "progress/batch" in m]


def example_overrides(tmp_path: Path, model_dir: Path, name: str, agent: str) -> list[str]:
    """``agl-tinker train`` overrides: the example ``name``'s ``agent`` on its tasks, two small batches, one runner."""
    return [
        f"agent=examples.{name}.{'hello' if name == 'hello' else 'agent'}:{agent}",
        f"tasks={ROOT / 'examples' / name / 'tasks.jsonl'}",
        f"log_path={tmp_path / 'run'}",
        f"policy.model_path={model_dir}",
        "batch_size=2",
        "group_size=2",
        "max_tokens=16",
        "warm_start.steps=0",
        "n_runners=1",
        "eval_every=0",
        "save_every=0",
        "rollout_timeout_s=60",
        "max_batches=2",
    ]


def assert_batches_trained(run: Path, n: int) -> None:
    """Batches 0..n-1 logged, each with every group's rollouts succeeded and some triplets kept."""
    lines = batch_lines(run)
    assert [m["progress/batch"] for m in lines] == list(range(n))
    assert all(m["env/all/by_group/frac_status_succeeded"] == 1.0 for m in lines)
    assert all(m["env/all/reconstruct/kept"] > 0 for m in lines)
