"""The run-log ports on files in the run's ``log_path``, in tinker-cookbook's formats.

Checkpoint records are ``checkpoints.jsonl`` lines read back with the cookbook's
``get_last_checkpoint``; metrics go through its ``ml_log`` loggers (``metrics.jsonl``, W&B).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from tinker_cookbook.checkpoint_utils import get_last_checkpoint
from tinker_cookbook.utils import ml_log

from ports.run_log import Checkpoint

CHECKPOINTS_FILE = "checkpoints.jsonl"
METRICS_FILE = "metrics.jsonl"
REFERENCE_FILE = "kl_reference.json"


class JsonlCheckpointLog:
    """``ports.run_log.CheckpointLog`` over ``log_path/checkpoints.jsonl`` and ``kl_reference.json``."""

    def __init__(self, log_path: str | Path) -> None:
        self.log_path = Path(log_path)

    def last(self) -> Checkpoint | None:
        record = get_last_checkpoint(str(self.log_path))
        if record is None or record.batch is None or record.state_path is None:
            return None
        return Checkpoint(name=record.name, batch=record.batch, state_path=record.state_path, final=bool(record.final))

    def append(self, checkpoint: Checkpoint) -> None:
        record: dict[str, object] = {"name": checkpoint.name, "batch": checkpoint.batch}
        record["state_path"] = checkpoint.state_path
        if checkpoint.final:
            record["final"] = True
        with open(self.log_path / CHECKPOINTS_FILE, "a") as file:
            file.write(json.dumps(record) + "\n")

    def reference_state(self) -> str | None:
        file = self.log_path / REFERENCE_FILE
        return str(json.loads(file.read_text())["state_path"]) if file.is_file() else None

    def set_reference_state(self, state_path: str) -> None:
        (self.log_path / REFERENCE_FILE).write_text(json.dumps({"state_path": state_path}))


class CookbookMetricsLog:
    """``ports.run_log.MetricsLog`` over a cookbook ``ml_log.Logger``."""

    def __init__(self, logger: ml_log.Logger) -> None:
        self.logger = logger

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.logger.log_metrics(dict(metrics), step=step)


def last_checkpoint(log_path: str | Path) -> Checkpoint | None:
    """The newest resumable record of a run's ``checkpoints.jsonl``."""
    return JsonlCheckpointLog(log_path).last()
