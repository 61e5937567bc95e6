"""Warm-start chats read from JSON Lines text: one ``{"messages": [...], "tools": [...]}`` record per non-blank line.

The record is OpenAI's chat fine-tuning format: ``messages`` exactly as written (JSON objects, each with a
``role`` and, for the renderer, a ``content``; an assistant's ``tool_calls`` as the chat API returns them), and
optionally the function ``tools`` declared for the chat, which the renderer writes into the system message as it
does for a request. A line that is not such a record is a ``ChatFileError`` naming the file and line; so is a
file without a single chat. Reading the file is the caller's (the pre-flight check and the composition root parse
the same text the same way).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from returns.result import Failure, Result, Success

ChatMessage = dict[str, object]
"""One message of a chat, as the file holds it (``role``, ``content`` and whatever else it has)."""


@dataclass(frozen=True, slots=True)
class Chat:
    """One warm-start example: its messages and the tools declared beside them (none: a chat without tools)."""

    messages: list[ChatMessage]
    tools: list[ChatMessage] = field(default_factory=list)


Chats = tuple[Chat, ...]


@dataclass(frozen=True, slots=True)
class ChatFileError:
    """Why a warm-start file was refused, with the line it happened on when there is one."""

    source: str
    reason: str
    line: int | None = None

    def __str__(self) -> str:
        if self.line is None:
            return f"warm-start file {self.source} {self.reason}"
        return f"{self.source}:{self.line}: {self.reason}"


def parse_chat(line: str) -> Result[Chat, str]:
    """The chat of one JSON Lines record, or why the line is not a chat record."""
    try:
        record = json.loads(line)
        messages = record["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise TypeError("messages must be a list of {role, content} objects")
        tools = record.get("tools", [])
        if not isinstance(tools, list) or not all(_is_function(t) for t in tools):
            raise TypeError('tools must be a list of {"type": "function", "function": {"name": ...}} objects')
        if not all(_calls_are_functions(m.get("tool_calls")) for m in messages):
            raise TypeError('tool_calls must be a list of {"function": {"name": ..., "arguments": "<json>"}} objects')
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        # The error's own words (a JSON syntax error, the missing key, what the record is instead).
        return Failure(f"not a chat record ({error})")
    return Success(Chat(messages, tools))


def _is_function(tool: object) -> bool:
    """An OpenAI function tool: the only kind the renderer declares."""
    if not isinstance(tool, dict) or tool.get("type") != "function":
        return False
    function = tool.get("function")
    return isinstance(function, dict) and isinstance(function.get("name"), str)


def _calls_are_functions(calls: object) -> bool:
    """No calls, or OpenAI tool calls whose arguments are a JSON string (as the chat API returns them)."""
    if calls is None:
        return True
    return isinstance(calls, list) and all(
        isinstance(c, dict)
        and isinstance(f := c.get("function"), dict)
        and isinstance(f.get("name"), str)
        and isinstance(f.get("arguments"), str)
        for c in calls
    )


def parse_chats(text: str, source: str) -> Result[Chats, ChatFileError]:
    """One chat per non-blank line; the first line that is not a chat record refuses the whole text."""
    chats: list[Chat] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match parse_chat(line):
            case Success(chat):
                chats.append(chat)
            case Failure(reason):
                return Failure(ChatFileError(source, reason, number))
    if not chats:
        return Failure(ChatFileError(source, "holds no chats"))
    return Success(tuple(chats))
