"""The run's files on resume: the redone batches' metrics lines, rollouts and transcript pages go, everything
written before stays; checkpoint records keep the learning-rate schedule."""

from __future__ import annotations

import json
from pathlib import Path

from adapters.files.run_log import (
    METRICS_FILE,
    ROLLOUTS_FILE,
    JsonlCheckpointLog,
    JsonlRolloutLog,
    truncate_metrics,
    truncate_rollouts,
)
from adapters.files.transcripts import remove_pages_from
from domain.groups import RolloutResult
from domain.trajectory import EMPTY_TRAJECTORY
from ports.run_log import TRANSCRIPT_INDEX, TRANSCRIPTS_DIR, Checkpoint


def test_lines_from_the_resume_step_on_are_dropped_atomically(tmp_path: Path) -> None:
    path = tmp_path / METRICS_FILE
    lines = [
        {"step": 0, "warm_start/loss_first": 3.0},
        {"step": 0, "progress/batch": 0},
        {"step": 1, "progress/batch": 1},
        {"note": "no step"},
        {"step": 2, "progress/batch": 2},
        {"step": 3, "progress/batch": 3},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"step": 4, "progr')  # torn by a crash

    assert truncate_metrics(path, 2) == 3
    assert [json.loads(line) for line in path.read_text().splitlines()] == lines[:4]
    assert [p.name for p in tmp_path.iterdir()] == [METRICS_FILE]  # no temporary file left behind

    before = path.stat().st_mtime_ns
    assert truncate_metrics(path, 2) == 0
    assert path.stat().st_mtime_ns == before  # nothing to drop: the file is not rewritten
    assert truncate_metrics(tmp_path / "absent.jsonl", 0) == 0


def rollout(rollout_id: str) -> RolloutResult:
    return RolloutResult(rollout_id, "succeeded", EMPTY_TRAJECTORY)


def test_rollouts_of_redone_batches_and_groups_are_dropped_and_the_rest_kept_in_order(tmp_path: Path) -> None:
    log = JsonlRolloutLog(tmp_path)
    for batch, group, rollout_id in [(0, 0, "a"), (1, 0, "b"), (1, 1, "c"), (2, 0, "d"), (1, 1, "e"), (3, 0, "f")]:
        log.append(batch, rollout(rollout_id), group)
    log.append(2, rollout("sync"))  # the synchronous loop does not name the group
    older = {"batch": 1, "rollout_id": "legacy", "status": "succeeded"}  # written before lines named their group
    with open(log.path, "a") as file:
        file.write(json.dumps(older) + "\n" + '{"batch": 3, "group": 1, "rollout_id": "to')  # torn by a crash

    # An asynchronous checkpoint: dataset batches from 2 on not started, group (1, 1) in flight.
    assert truncate_rollouts(log.path, 2, [(1, 1)]) == 6
    assert [json.loads(line)["rollout_id"] for line in log.path.read_text().splitlines()] == ["a", "b", "legacy"]
    assert [p.name for p in tmp_path.iterdir()] == [ROLLOUTS_FILE]

    before = log.path.stat().st_mtime_ns
    log.truncate_from(2, [(1, 1)])
    assert log.path.stat().st_mtime_ns == before  # nothing to drop: not rewritten
    log.truncate_from(1)
    assert [json.loads(line)["rollout_id"] for line in log.path.read_text().splitlines()] == ["a"]
    assert truncate_rollouts(tmp_path / "absent.jsonl", 0) == 0


def test_transcript_pages_from_the_resume_step_on_go_with_the_index_that_linked_them(tmp_path: Path) -> None:
    folder = tmp_path / TRANSCRIPTS_DIR
    folder.mkdir()
    names = ["train-000001.html", "eval-000002.html", "train-000002.html", "eval-000003.html", "train-000010.html"]
    for name in [*names, TRANSCRIPT_INDEX, "train-000003.htmlab12.tmp", "notes.html"]:
        (folder / name).write_text(name)

    removed = remove_pages_from(folder, 2)

    assert sorted(p.name for p in folder.iterdir()) == ["notes.html", "train-000001.html"]
    assert TRANSCRIPT_INDEX in removed and "train-000003.htmlab12.tmp" in removed
    assert remove_pages_from(folder, 2) == []  # nothing left to remove: the index is not asked for again
    assert remove_pages_from(tmp_path / "absent", 0) == []


def test_checkpoint_records_keep_the_learning_rate_schedule(tmp_path: Path) -> None:
    log = JsonlCheckpointLog(tmp_path)
    log.append(Checkpoint("000004", 4, "state/4"))
    assert log.last() == Checkpoint("000004", 4, "state/4")  # a record without a schedule (older runs)
    log.append(Checkpoint("final", 12, "state/final", final=True, planned=12, schedule=(8, 12)))
    assert log.last() == Checkpoint("final", 12, "state/final", final=True, planned=12, schedule=(8, 12))
