"""Warm-start chats read from JSON Lines text: one ``{"messages": [...]}`` record per non-blank line.

A chat is the record's ``messages`` exactly as written: a list of JSON objects, each with a ``role``
(and, for the renderer, a ``content``). A line that is not such a record is a ``ChatFileError``
naming the file and line; so is a file without a single chat. Reading the file is the caller's
(the pre-flight check and the composition root parse the same text the same way).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from returns.result import Failure, Result, Success

ChatMessage = dict[str, object]
"""One message of a chat, as the file holds it (``role``, ``content`` and whatever else it has)."""
Chat = list[ChatMessage]
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
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        # The error's own words (a JSON syntax error, the missing key, what the record is instead).
        return Failure(f"not a chat record ({error})")
    return Success(messages)


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
