"""The arithmetic example: its reward reads the reply's last number, and its test questions are held out."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from examples.arithmetic.agent import last_number, sum_reward

HERE = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"


def test_the_reward_is_the_last_number_of_the_reply() -> None:
    assert sum_reward("3 + 8 = 11", "11") == 1.0
    assert sum_reward("3 + 8 = 11.\n\nThis is a classic example", "11") == 1.0
    assert sum_reward("11, or 3 + 8", "11") == 0.0
    assert sum_reward("eleven", "11") == 0.0
    assert sum_reward("110", "11") == 0.0


@given(st.lists(st.integers(min_value=-999, max_value=999), min_size=1), st.text(alphabet=" =+.,abc\n", min_size=1))
def test_last_number_finds_the_last_integer_whatever_surrounds_it(numbers: list[int], glue: str) -> None:
    assert last_number(glue.join(map(str, numbers)) + glue) == str(numbers[-1])


def pairs(name: str) -> set[frozenset[str]]:
    records = [json.loads(line) for line in (HERE / name).read_text().splitlines()]
    for r in records:
        a, b = r["question"].removeprefix("What is ").removesuffix("?").split(" + ")
        assert int(a) + int(b) == int(r["answer"])
    return {frozenset(r["question"].removeprefix("What is ").removesuffix("?").split(" + ")) for r in records}


def test_no_test_question_is_a_training_question_in_either_order() -> None:
    train, test = pairs("tasks.jsonl"), pairs("test_tasks.jsonl")
    assert len(test) == 40 and len(train) == 170
    assert not train & test
