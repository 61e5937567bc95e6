"""metrics.jsonl on resume: the redone batches' old lines go, everything logged before stays."""

from __future__ import annotations

import json
from pathlib import Path

from adapters.files.run_log import METRICS_FILE, truncate_metrics


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
