"""Agents the learning checks train, written as users write them (``openai`` client, the tools API).

Each asks the demo's question (a number word) in another shape, so the tiny model can learn it within a
few dozen batches: the answer only in a second turn, or only as a tool call's argument.
"""

from __future__ import annotations

import json
import random
from typing import Any

import agentlightning as agl
from openai import AsyncOpenAI

from app.demo.task import NUMBER_WORDS

AGAIN = "again"

PRESS = {
    "type": "function",
    "function": {
        "name": "press",
        "description": "Press the key of one digit.",
        "parameters": {"type": "object", "properties": {"digit": {"type": "integer"}}, "required": ["digit"]},
    },
}


@agl.rollout
async def second_turn_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """The word, a first reply nobody grades, then "again": only the second reply is graded (the word's digit)."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    messages: list[Any] = [{"role": "user", "content": task["word"]}]
    first = await client.chat.completions.create(model=llm.model, messages=messages)
    messages += [{"role": "assistant", "content": first.choices[0].message.content or ""}]
    messages += [{"role": "user", "content": AGAIN}]
    second = await client.chat.completions.create(model=llm.model, messages=messages)
    return 1.0 if (second.choices[0].message.content or "").strip() == task["digit"] else 0.0


@agl.rollout
async def press_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """The model must call ``press`` with the word's digit; the tool runs, the model closes the turn ungraded."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    messages: list[Any] = [{"role": "user", "content": task["word"]}]
    reply = (await client.chat.completions.create(model=llm.model, messages=messages, tools=[PRESS])).choices[0]
    calls = reply.message.tool_calls or []
    if not calls or calls[0].type != "function" or calls[0].function.name != "press":
        return 0.0
    try:
        pressed = json.loads(calls[0].function.arguments).get("digit")
    except (json.JSONDecodeError, AttributeError):
        pressed = None
    messages += [reply.message, {"role": "tool", "tool_call_id": calls[0].id, "content": f"pressed {pressed}"}]
    await client.chat.completions.create(model=llm.model, messages=messages, tools=[PRESS])
    return 1.0 if str(pressed) == task["digit"] else 0.0


def two_turn_format_chats(n: int, seed: int) -> list[list[dict[str, str]]]:
    """Warm-start chats of the second-turn game's format, never its answer: random digits in both turns."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        first, second = str(rng.randrange(10)), str(rng.randrange(10))
        chats.append(
            [
                {"role": "user", "content": rng.choice(NUMBER_WORDS)},
                {"role": "assistant", "content": first},
                {"role": "user", "content": AGAIN},
                {"role": "assistant", "content": second},
            ]
        )
    return chats


def press_format_chats(tools_prefix: list[dict[str, str]], n: int, seed: int) -> list[list[dict[str, str]]]:
    """Warm-start chats of the tool call's format (after the rendered tools prompt), with a random digit."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        call = {"name": "press", "arguments": {"digit": rng.randrange(10)}}
        chats.append(
            [
                *tools_prefix,
                {"role": "user", "content": rng.choice(NUMBER_WORDS)},
                {"role": "assistant", "content": f"<tool_call>\n{json.dumps(call)}\n</tool_call>"},
            ]
        )
    return chats
