"""The run-log ports on files in the run's ``log_path``, in tinker-cookbook's formats.

Checkpoint records are ``checkpoints.jsonl`` lines read back with the cookbook's
``get_last_checkpoint``; metrics go through its ``ml_log`` loggers (``metrics.jsonl``, W&B);
training rollouts, when asked for, are ``rollouts.jsonl`` lines.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import IO

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
SCHEDULE = "lr_schedule_ends"
"""Extra key of checkpoint records: the learning-rate schedule's segment ends (``Checkpoint.schedule``)."""


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
            schedule=tuple(int(end) for end in record.extra.get(SCHEDULE) or ()),
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
        if checkpoint.schedule:
            record[SCHEDULE] = list(checkpoint.schedule)
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
    version; rejected triplets are counted by reason. ``group`` is the rollout's group in its batch where
    the loop knows it (asynchronous runs; else null). A resumed run first drops the lines of what it
    redoes, so each rollout trained appears once.
    """

    def __init__(self, log_path: str | Path) -> None:
        self.path = Path(log_path) / ROLLOUTS_FILE

    def append(self, batch: int, result: RolloutResult, group: int | None = None) -> None:
        trajectory = result.trajectory
        record = {
            "batch": batch,
            "group": group,
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

    def truncate_from(self, batch: int, groups: Collection[tuple[int, int]] = ()) -> None:
        truncate_rollouts(self.path, batch, groups)


def truncate_metrics(path: Path, step: int) -> int:
    """Keep the lines of ``path`` logged before ``step``; returns how many were dropped.

    The cookbook's JSON logger appends, so a run resumed from an older checkpoint would log the
    redone batches twice. Lines without a step are kept; a line that does not parse (a write torn
    by the crash) is dropped. The file is rewritten as ``drop_lines`` does.
    """

    def drop(line: bytes) -> bool:
        record = json.loads(line)
        logged = record.get("step") if isinstance(record, dict) else None
        return isinstance(logged, int) and logged >= step

    return drop_lines(path, drop)


_ROLLOUT_HEAD = re.compile(rb'\{"batch": (\d+), "group": (\d+|null),')
"""How ``JsonlRolloutLog`` starts a line: read without parsing the tokens that follow (lines are large)."""


def truncate_rollouts(path: Path, batch: int, groups: Collection[tuple[int, int]] = ()) -> int:
    """Drop the rollout lines of dataset batch ``batch`` and later and of the (batch, group) ``groups``
    (lines without a group are kept there); returns how many were dropped (as ``drop_lines``)."""
    redone = set(groups)

    def drop(line: bytes) -> bool:
        head = _ROLLOUT_HEAD.match(line)
        if head is not None:
            b, g = int(head[1]), None if head[2] == b"null" else int(head[2])
        else:  # written by an older version (no group): parse it all
            record = json.loads(line)
            b, g = int(record["batch"]), record.get("group")
        return b >= batch or (g is not None and (b, int(g)) in redone)

    return drop_lines(path, drop)


def drop_lines(path: Path, drop: Callable[[bytes], bool]) -> int:
    """Remove the lines of ``path`` that ``drop`` picks, and a last line without its newline or any line that
    ``drop`` cannot read (a write torn by a crash); returns how many were removed.

    Streamed, so memory stays flat however large the file; a file with nothing to remove is not rewritten.
    Otherwise the kept lines go to a file beside it, swapped in with ``os.replace``: a crash leaves either
    the old or the new file, never half of one.
    """
    if not path.is_file():
        return 0
    dropped = 0
    kept_bytes = 0
    out: IO[bytes] | None = None
    try:
        with open(path, "rb") as source:
            for line in source:
                if line.endswith(b"\n") and not _drops(drop, line):
                    if out is None:
                        kept_bytes += len(line)
                    else:
                        out.write(line)
                    continue
                dropped += bool(line.strip())
                if out is None:
                    out = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed below, or removed on failure)
                        "wb", dir=path.parent, prefix=path.name, suffix=".tmp", delete=False
                    )
                    with open(path, "rb") as head:
                        _copy(head, out, kept_bytes)
        if out is None:
            return 0
        out.close()
        os.replace(out.name, path)
        return dropped
    except BaseException:
        if out is not None:
            out.close()
            Path(out.name).unlink(missing_ok=True)
        raise


def _drops(drop: Callable[[bytes], bool], line: bytes) -> bool:
    try:
        return drop(line)
    except (ValueError, KeyError, TypeError):  # not JSON, or not a record of this file
        return True


def _copy(source: IO[bytes], target: IO[bytes], n: int, chunk: int = 1 << 20) -> None:
    """The first ``n`` bytes of ``source`` to ``target``."""
    while n > 0:
        data = source.read(min(chunk, n))
        if not data:
            break
        target.write(data)
        n -= len(data)


def last_checkpoint(log_path: str | Path) -> Checkpoint | None:
    """The newest resumable record of a run's ``checkpoints.jsonl``."""
    return JsonlCheckpointLog(log_path).last()
