"""Task files through the real readers and the launch: tasks as written, and no test set unless asked."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from adapters.cookbook.env import read_task_file
from app.config import load_config
from app.launch import LaunchError, build_datasets, split_tasks


def test_plain_string_tasks_reach_the_dataset_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "hello.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in ["0", "007", "42", {"q": "1"}]))
    assert read_task_file(str(path)) == ["0", "007", "42", {"q": "1"}]


def test_parquet_rows_keep_their_column_types_and_nulls(tmp_path: Path) -> None:
    path = tmp_path / "tasks.parquet"
    pd.DataFrame({"q": ["007", "8"], "n": [1, 2], "x": [None, "a"]}).to_parquet(path)
    rows = read_task_file(str(path))
    assert rows == [{"q": "007", "n": 1, "x": None}, {"q": "8", "n": 2, "x": "a"}]
    assert all(type(r["n"]) is int for r in rows)  # type: ignore[index]


def test_a_broken_task_file_is_one_line_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('"a"\n{broken\n')
    cfg = load_config(None, [f"tasks={path}", f"log_path={tmp_path}"]).unwrap()
    with pytest.raises(LaunchError, match=rf"^{path}:2: not a JSON value"):
        split_tasks(cfg)


async def test_user_tasks_get_no_test_set_unless_one_is_given_or_split(tmp_path: Path) -> None:
    path = tmp_path / "hello.jsonl"
    path.write_text("\n".join(json.dumps(str(i)) for i in range(10)))
    base = [f"tasks={path}", f"log_path={tmp_path}", "batch_size=2"]

    dataset, test = await build_datasets(load_config(None, base).unwrap())
    assert test is None
    assert sorted(dataset.dataset) == [str(i) for i in range(10)]

    train, held_out = split_tasks(load_config(None, [*base, "test_split=0.3"]).unwrap())
    assert len(held_out) == 3 and sorted(train + held_out) == sorted(str(i) for i in range(10))

    _dataset, given = await build_datasets(load_config(None, [*base, f"test_tasks={path}"]).unwrap())
    assert given is not None and [b.task for b in given.get_batch(0)] == [str(i) for i in range(10)]


async def test_the_demo_keeps_its_own_test_words(tmp_path: Path) -> None:
    _dataset, test = await build_datasets(load_config(None, [f"log_path={tmp_path}"]).unwrap())
    assert test is not None and len(test.get_batch(0)) == 10
