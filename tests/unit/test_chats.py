"""Warm-start chats come back exactly as written, tools too; the first line that is not a chat record is named."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

from domain.chats import Chat, ChatFileError, parse_chat, parse_chats

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": st.text(max_size=20)},
    optional={"name": st.text(max_size=5), "extra": json_scalars},
)
chats = st.lists(messages, max_size=4)
blank_lines = st.sampled_from(["", " ", "\t", "   "])


def record(chat: list[dict[str, object]]) -> str:
    return json.dumps({"messages": chat})


@given(st.lists(st.tuples(chats, st.lists(blank_lines, max_size=2)), min_size=1, max_size=6))
def test_chats_come_back_as_written_and_blank_lines_are_skipped(
    written: list[tuple[list[dict[str, object]], list[str]]],
) -> None:
    text = "\n".join(line for chat, blanks in written for line in [*blanks, record(chat)])
    parsed = parse_chats(text, "chats.jsonl").unwrap()
    assert list(parsed) == [Chat(chat) for chat, _ in written]


not_chat_records = st.sampled_from(
    [
        "not json",
        '{"messages": ',
        "[]",
        '"a string"',
        "7",
        "null",
        '{"text": "x"}',
        '{"messages": "hi"}',
        '{"messages": {"role": "user"}}',
        '{"messages": [{"content": "no role"}]}',
        '{"messages": [{"role": "user"}, "text"]}',
        '{"messages": [], "tools": {"type": "function"}}',
        '{"messages": [], "tools": [{"type": "function", "function": {"description": "no name"}}]}',
        '{"messages": [], "tools": [{"type": "retrieval"}]}',
        '{"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}]}',
    ]
)


@given(st.lists(chats, max_size=4), not_chat_records, st.lists(chats, max_size=3))
def test_the_first_line_that_is_not_a_chat_record_is_named(
    before: list[list[dict[str, object]]], bad: str, after: list[list[dict[str, object]]]
) -> None:
    text = "\n".join([*(record(c) for c in before), bad, *(record(c) for c in after)])
    match parse_chats(text, "data/chats.jsonl"):
        case Failure(ChatFileError(source, reason, line) as error):
            assert (source, line) == ("data/chats.jsonl", len(before) + 1)
            assert reason.startswith("not a chat record (") and reason.endswith(")")
            assert str(error) == f"data/chats.jsonl:{len(before) + 1}: {reason}"
        case other:
            raise AssertionError(other)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"text": "x"}', "not a chat record ('messages')"),
        ('{"messages": "hi"}', "not a chat record (messages must be a list of {role, content} objects)"),
        ('{"messages": [{"content": "x"}]}', "not a chat record (messages must be a list of {role, content} objects)"),
        ("{", "not a chat record (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
        (
            '{"messages": [], "tools": ["add"]}',
            'not a chat record (tools must be a list of {"type": "function", "function": {"name": ...}} objects)',
        ),
        (
            '{"messages": [{"role": "assistant", "tool_calls": {"name": "add"}}]}',
            "not a chat record (tool_calls must be a list of "
            '{"function": {"name": ..., "arguments": "<json>"}} objects)',
        ),
    ],
)
def test_a_line_that_is_not_a_chat_record_says_why(line: str, reason: str) -> None:
    assert parse_chat(line) == Failure(reason)


def test_a_chat_keeps_every_key_of_its_messages() -> None:
    chat: list[dict[str, object]] = [
        {"role": "user", "content": "seven"},
        {"role": "assistant", "content": "7", "weight": 1},
    ]
    assert parse_chat(record(chat)) == Success(Chat(chat))
    assert parse_chat('{"messages": []}') == Success(Chat([]))


def test_a_chat_in_openais_fine_tuning_format_keeps_its_tools_and_calls() -> None:
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'}}
    chat: list[dict[str, object]] = [
        {"role": "user", "content": "What is 3 + 4?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "7"},
        {"role": "assistant", "content": "7"},
    ]
    assert parse_chat(json.dumps({"messages": chat, "tools": tools})) == Success(Chat(chat, tools))


@pytest.mark.parametrize("text", ["", "\n", " \n\t\n"])
def test_a_text_without_a_chat_is_refused(text: str) -> None:
    match parse_chats(text, "chats.jsonl"):
        case Failure(error):
            assert error == ChatFileError("chats.jsonl", "holds no chats")
            assert str(error) == "warm-start file chats.jsonl holds no chats"
        case other:
            raise AssertionError(other)
