"""The calculator example's files: one-digit questions, and warm-start exchanges that never teach the tool choice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from domain.chats import parse_chat
from examples.tools import warm_start
from examples.tools.agent import SYSTEM, TOOLS, run_tool

HERE = Path(warm_start.__file__).parent


def read_jsonl(name: str) -> list[Any]:
    return [json.loads(line) for line in (HERE / name).read_text().splitlines()]


def parse(question: str) -> warm_start.Question:
    _what, _is, a, op, b = question.removesuffix("?").split()
    return int(a), op, int(b)


@given(index=st.integers(0, len(warm_start.questions()) - 1), tool=st.sampled_from(["add", "multiply"]))
def test_an_exchange_calls_the_tool_with_the_questions_operands_and_reports_its_result(index: int, tool: str) -> None:
    question = warm_start.questions()[index]
    chat = parse_chat(json.dumps(warm_start.exchange(question, tool, 0))).unwrap()  # a record the warm start reads
    assert chat.tools == TOOLS
    system, user, call_turn, result, answer = chat.messages
    assert (system["content"], user["content"]) == (SYSTEM, warm_start.ask(question))
    (call,) = call_turn["tool_calls"]  # type: ignore[misc]
    a, _op, b = question
    assert call["function"]["name"] == tool and json.loads(call["function"]["arguments"]) == {"a": a, "b": b}
    assert result["tool_call_id"] == call["id"]
    assert result["content"] == answer["content"] == run_tool(tool, call["function"]["arguments"])


def test_the_tool_choice_is_left_to_rl_and_the_test_questions_are_held_out() -> None:
    calls = [
        (r["messages"][1]["content"], r["messages"][2]["tool_calls"][0]["function"]["name"])
        for r in read_jsonl("warm_start.jsonl")
    ]
    # Every question once with each tool: the warm start prefers neither, whatever the operator.
    assert sorted(calls) == sorted(
        (warm_start.ask(q), tool) for q in warm_start.questions() for tool in ("add", "multiply")
    )
    tasks, test = read_jsonl("tasks.jsonl"), read_jsonl("test_tasks.jsonl")
    assert not {t["question"] for t in tasks} & {t["question"] for t in test}
    assert sorted(parse(t["question"])[1] for t in test) == ["*"] * 5 + ["+"] * 5
    assert all(t == warm_start.task(parse(t["question"])) for t in tasks + test)


def test_the_committed_files_are_what_the_generator_writes() -> None:
    for name, records in warm_start.contents().items():
        assert read_jsonl(name) == records, name
