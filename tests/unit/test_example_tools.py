"""The calculator example's files: one-digit questions, and warm-start exchanges that never teach the tool choice."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from domain.chats import parse_chat
from examples.tools import warm_start
from examples.tools.agent import SYSTEM, TOOLS, final_reward, run_tool

HERE = Path(warm_start.__file__).parent


def read_jsonl(name: str) -> list[Any]:
    return [json.loads(line) for line in (HERE / name).read_text().splitlines()]


def parse(question: str) -> warm_start.Question:
    _what, _is, a, op, b = question.removesuffix("?").split()
    return int(a), op, int(b)


@given(seed=st.integers(0, 2**32 - 1), index=st.integers(0, len(warm_start.questions()) - 1))
def test_an_exchange_calls_a_tool_with_the_questions_operands_and_reports_its_result(seed: int, index: int) -> None:
    question = warm_start.questions()[index]
    record = warm_start.random_tool_exchange(random.Random(seed), question, 0)
    chat = parse_chat(json.dumps(record)).unwrap()  # a record the warm start reads
    assert chat.tools == TOOLS
    system, user, call_turn, tool, answer = chat.messages
    assert (system["content"], user["content"]) == (SYSTEM, warm_start.ask(question))
    (call,) = call_turn["tool_calls"]  # type: ignore[misc]
    a, _op, b = question
    assert call["function"]["name"] in ("add", "multiply")
    assert json.loads(call["function"]["arguments"]) == {"a": a, "b": b}
    result = run_tool(call["function"]["name"], call["function"]["arguments"])
    assert tool["tool_call_id"] == call["id"] and tool["content"] == answer["content"] == result


def test_the_tool_choice_is_left_to_rl_and_the_test_questions_are_held_out() -> None:
    records = read_jsonl("warm_start.jsonl")
    right = [
        final_reward(r["messages"][4]["content"], warm_start.task(parse(r["messages"][1]["content"]))["answer"])
        for r in records
    ]
    assert 0.4 < sum(right) / len(right) < 0.6  # a random tool: about half the exchanges end on the right number
    tasks, test = read_jsonl("tasks.jsonl"), read_jsonl("test_tasks.jsonl")
    assert not {t["question"] for t in tasks} & {t["question"] for t in test}
    assert sorted(parse(t["question"])[1] for t in test) == ["*"] * 5 + ["+"] * 5
    assert all(t == warm_start.task(parse(t["question"])) for t in tasks + test)


def test_the_committed_files_are_what_the_generator_writes() -> None:
    for name, records in warm_start.contents().items():
        assert read_jsonl(name) == records, name
