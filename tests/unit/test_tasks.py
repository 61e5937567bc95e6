"""Task files reach the agent exactly as written: types kept, nothing invented, errors name the line."""

from __future__ import annotations

import csv
import io
import json

from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

from domain.tasks import TaskFileError, parse_csv_tasks, parse_json_tasks, parse_jsonl_tasks

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


def same_json(a: object, b: object) -> bool:
    """Equal values of equal JSON types (``1 == 1.0 == True`` in Python, not in a task)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@given(st.lists(json_values, min_size=1, max_size=8))
def test_jsonl_tasks_come_back_with_their_json_types(tasks: list[object]) -> None:
    text = "\n".join(json.dumps(t) for t in tasks)
    parsed = parse_jsonl_tasks(text, "t.jsonl").unwrap()
    assert len(parsed) == len(tasks)
    assert all(same_json(p, t) for p, t in zip(parsed, tasks, strict=True))


@given(st.lists(json_values, min_size=1, max_size=8))
def test_a_json_array_of_tasks_comes_back_as_written(tasks: list[object]) -> None:
    parsed = parse_json_tasks(json.dumps(tasks), "t.json").unwrap()
    assert same_json(list(parsed), tasks)


cells = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\r"), max_size=6)


@given(st.integers(min_value=1, max_value=4).flatmap(lambda n: st.tuples(
    st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=4), min_size=n, max_size=n, unique=True),
    st.lists(st.lists(cells, min_size=n, max_size=n), min_size=1, max_size=5),
)))  # fmt: skip
def test_csv_rows_are_dicts_of_the_strings_in_the_file(table: tuple[list[str], list[list[str]]]) -> None:
    header, rows = table
    rows = [r for r in rows if r != [""] * len(r) or len(r) > 1]  # a lone empty cell is a blank line in CSV
    if not rows:
        return
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(rows)
    parsed = parse_csv_tasks(out.getvalue(), "t.csv").unwrap()
    assert list(parsed) == [dict(zip(header, r, strict=True)) for r in rows]


def test_string_tasks_stay_strings() -> None:
    text = '"0"\n"007"\n"hello"\n{"a": "1"}\n{}\n'
    assert parse_jsonl_tasks(text, "t.jsonl").unwrap() == ("0", "007", "hello", {"a": "1"}, {})


def test_csv_values_stay_strings_and_missing_fields_are_errors() -> None:
    assert parse_csv_tasks("q,n\n0,007\n", "t.csv").unwrap() == ({"q": "0", "n": "007"},)
    match parse_csv_tasks("q,n\n0\n", "t.csv"):
        case Failure(TaskFileError(line=2) as error):
            assert str(error) == "t.csv:2: has 1 fields where the header has 2"
        case other:
            raise AssertionError(other)


def test_a_bad_line_is_named_with_its_file_and_line_number() -> None:
    match parse_jsonl_tasks('"ok"\n\nnot json\n', "data/train.jsonl"):
        case Failure(error):
            assert str(error).startswith("data/train.jsonl:3: not a JSON value")
        case Success(tasks):
            raise AssertionError(tasks)


def test_empty_files_and_non_arrays_are_refused() -> None:
    assert str(parse_jsonl_tasks("\n\n", "e.jsonl").failure()) == "e.jsonl: holds no tasks"
    not_array = parse_json_tasks('{"a": 1}', "o.json").failure()
    assert str(not_array) == "o.json: must hold a JSON array of tasks, not a dict"
    assert str(parse_csv_tasks("", "e.csv").failure()) == "e.csv: has no header row"
