"""The arithmetic example: its reward reads the reply's last number, and its test questions are held out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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


def chat_questions(name: str) -> tuple[list[str], list[str]]:
    """A chat file's first and second questions, each checked against its answer."""
    firsts, seconds = [], []
    for line in (HERE / name).read_text().splitlines():
        r = json.loads(line)
        for question, answer, side in (
            (r["question"], r["answer"], firsts),
            (r["then_question"], r["then_answer"], seconds),
        ):
            a, b = question.removeprefix("What is ").removesuffix("?").split(" + ")
            assert int(a) + int(b) == int(answer)
            side.append(question)
    return firsts, seconds


@pytest.mark.parametrize("side", ["", "test_"])
def test_each_chat_asks_its_sides_questions_once_first_and_once_second_never_twice_in_one_chat(side: str) -> None:
    singles = [json.loads(line)["question"] for line in (HERE / f"{side}tasks.jsonl").read_text().splitlines()]
    firsts, seconds = chat_questions(f"chat_{side}tasks.jsonl")
    assert sorted(firsts) == sorted(singles) == sorted(seconds)
    assert all(first != second for first, second in zip(firsts, seconds, strict=True))
