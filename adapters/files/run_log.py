"""The run-log ports on files in the run's ``log_path``, in tinker-cookbook's formats.

Checkpoint records are ``checkpoints.jsonl`` lines read back with the cookbook's
``get_last_checkpoint``; metrics go through its ``ml_log`` loggers (``metrics.jsonl``, W&B);
training rollouts, when asked for, are ``rollouts.jsonl`` lines.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tinker_cookbook.checkpoint_utils import get_last_checkpoint
from tinker_cookbook.utils import ml_log

from domain.groups import RolloutResult
from ports.run_log import Checkpoint

CHECKPOINTS_FILE = "checkpoints.jsonl"
METRICS_FILE = "metrics.jsonl"
ROLLOUTS_FILE = "rollouts.jsonl"
REFERENCE_FILE = "kl_reference.json"
FRONTIER, PENDING, PLANNED = "async_frontier", "async_pending", "planned_batches"
"""Extra keys of an asynchronous run's checkpoint records (the cookbook keeps unknown keys in ``extra``)."""


class JsonlCheckpointLog:
    """``ports.run_log.CheckpointLog`` over ``log_path/checkpoints.jsonl`` and ``kl_reference.json``."""

    def __init__(self, log_path: str | Path) -> None:
        self.log_path = Path(log_path)

    def last(self) -> Checkpoint | None:
        record = get_last_checkpoint(str(self.log_path))
        if record is None or record.batch is None or record.state_path is None:
            return None
        frontier = record.extra.get(FRONTIER)
        pending = record.extra.get(PENDING) or []
        return Checkpoint(
            name=record.name,
            batch=record.batch,
            state_path=record.state_path,
            final=bool(record.final),
            planned=int(planned) if (planned := record.extra.get(PLANNED)) is not None else None,
            frontier=int(frontier) if frontier is not None else None,
            pending=tuple((int(b), int(i)) for b, i in pending),
        )

    def append(self, checkpoint: Checkpoint) -> None:
        record: dict[str, object] = {"name": checkpoint.name, "batch": checkpoint.batch}
        record["state_path"] = checkpoint.state_path
        if checkpoint.final:
            record["final"] = True
        if checkpoint.planned is not None:
            record[PLANNED] = checkpoint.planned
        if checkpoint.frontier is not None:
            record[FRONTIER] = checkpoint.frontier
            record[PENDING] = [list(key) for key in checkpoint.pending]
        with open(self.log_path / CHECKPOINTS_FILE, "a") as file:
            file.write(json.dumps(record) + "\n")

    def reference_state(self) -> str | None:
        file = self.log_path / REFERENCE_FILE
        return str(json.loads(file.read_text())["state_path"]) if file.is_file() else None

    def set_reference_state(self, state_path: str) -> None:
        (self.log_path / REFERENCE_FILE).write_text(json.dumps({"state_path": state_path}))


class CookbookMetricsLog:
    """``ports.run_log.MetricsLog`` over a cookbook ``ml_log.Logger`` (its ``metrics.jsonl`` in ``log_path``)."""

    def __init__(self, logger: ml_log.Logger, log_path: str | Path | None = None) -> None:
        self.logger = logger
        self.log_path = Path(log_path) if log_path is not None else None

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.logger.log_metrics(dict(metrics), step=step)

    def truncate_from(self, step: int) -> None:
        if self.log_path is not None:
            truncate_metrics(self.log_path / METRICS_FILE, step)


class JsonlRolloutLog:
    """``ports.run_log.RolloutLog`` over ``log_path/rollouts.jsonl``: one line per rollout, appended as it finishes.

    A line holds the dataset batch, the rollout id, its status (and the loop's reason for ending it), the
    total reward, and every kept transition's prompt and sampled token ids, logprobs, reward and policy
    version; rejected triplets are counted by reason. A batch redone after a resume appears again, with
    new rollout ids.
    """

    def __init__(self, log_path: str | Path) -> None:
        self.path = Path(log_path) / ROLLOUTS_FILE

    def append(self, batch: int, result: RolloutResult) -> None:
        trajectory = result.trajectory
        record = {
            "batch": batch,
            "rollout_id": result.rollout_id,
            "status": result.status,
            "reason": result.reason,
            "total_reward": trajectory.total_reward,
            "final_reward_missing": trajectory.final_reward_missing,
            "rejected": {reason.value: n for reason, n in trajectory.rejection_counts().items()},
            "transitions": [
                {
                    "ob": list(t.ob),
                    "ac": list(t.ac),
                    "logprobs": list(t.logprobs),
                    "reward": t.reward,
                    "policy_version": t.policy_version,
                }
                for t in trajectory.transitions
            ],
        }
        with open(self.path, "a") as file:
            file.write(json.dumps(record) + "\n")


def truncate_metrics(path: Path, step: int) -> int:
    """Keep the lines of ``path`` logged before ``step``; returns how many were dropped.

    The cookbook's JSON logger appends, so a run resumed from an older checkpoint would log the
    redone batches twice. The file is rewritten beside itself and swapped in with ``os.replace``:
    a crash leaves either the old or the new file, never half of one. Lines without a step are
    kept; a line that does not parse (a write torn by the crash) is dropped.
    """
    if not path.is_file():
        return 0
    kept: list[str] = []
    dropped = 0
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            dropped += bool(line.strip())
            continue
        logged = record.get("step") if isinstance(record, dict) else None
        if isinstance(logged, int) and logged >= step:
            dropped += 1
        else:
            kept.append(line)
    if dropped:
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, suffix=".tmp", delete=False) as file:
            file.write("".join(line + "\n" for line in kept))
        os.replace(file.name, path)
    return dropped


def last_checkpoint(log_path: str | Path) -> Checkpoint | None:
    """The newest resumable record of a run's ``checkpoints.jsonl``."""
    return JsonlCheckpointLog(log_path).last()
