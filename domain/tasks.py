"""Tasks read from text exactly as written: what a task file holds is what the agent receives.

JSON Lines and JSON keep every value's JSON type (the line ``"007"`` is the string ``"007"``, an
object keeps exactly its keys); CSV rows are dicts of strings keyed by the header, because CSV
has no types. A malformed line or row is a ``TaskFileError`` naming the file and line.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass

from returns.result import Failure, Result, Success


@dataclass(frozen=True, slots=True)
class TaskFileError:
    """Why a task file was refused, with the line it happened on when there is one."""

    source: str
    reason: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        return f"{where}: {self.reason}"


Tasks = tuple[object, ...]


def parse_jsonl_tasks(text: str, source: str) -> Result[Tasks, TaskFileError]:
    """One JSON value per non-blank line."""
    tasks: list[object] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            tasks.append(json.loads(line))
        except json.JSONDecodeError as error:
            return Failure(TaskFileError(source, f"not a JSON value ({error.msg})", number))
    return _non_empty(tasks, source)


def parse_json_tasks(text: str, source: str) -> Result[Tasks, TaskFileError]:
    """A JSON array of tasks."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        return Failure(TaskFileError(source, f"not JSON ({error.msg})", error.lineno))
    if not isinstance(data, list):
        return Failure(TaskFileError(source, f"must hold a JSON array of tasks, not a {type(data).__name__}"))
    return _non_empty(data, source)


def parse_csv_tasks(text: str, source: str) -> Result[Tasks, TaskFileError]:
    """One dict of strings per row, keyed by the header row; every row has exactly the header's fields."""
    rows = csv.reader(io.StringIO(text))
    try:
        header = next(rows, None)
        if not header:
            return Failure(TaskFileError(source, "has no header row"))
        if len(set(header)) != len(header):
            return Failure(TaskFileError(source, "repeats a column name in its header", 1))
        tasks: list[object] = []
        for row in rows:
            if not row:
                continue
            if len(row) != len(header):
                reason = f"has {len(row)} fields where the header has {len(header)}"
                return Failure(TaskFileError(source, reason, rows.line_num))
            tasks.append(dict(zip(header, row, strict=True)))
    except csv.Error as error:
        return Failure(TaskFileError(source, f"is not valid CSV ({error})", rows.line_num))
    return _non_empty(tasks, source)


def _non_empty(tasks: list[object], source: str) -> Result[Tasks, TaskFileError]:
    if not tasks:
        return Failure(TaskFileError(source, "holds no tasks"))
    return Success(tuple(tasks))
