"""Agents of the learning checks not yet moved to held-out items, written as users write them (``openai`` client,
the tools API): the demo's question (a number word) whose answer only counts in a second turn, and a keypad whose
code, one for every door, only a tool call's argument can enter. Their test items are their training items, and
the keypad's reward is a bias, not a mapping: ``learning_agents`` has the held-out checks that replace them once
their batches and rates are measured (bench/README.md, the learning checks per seed).
"""

from __future__ import annotations

import json
import random
from typing import Any

import agentlightning as agl
from openai import AsyncOpenAI

from app.demo.task import NUMBER_WORDS

AGAIN = "again"


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


KEYPAD_CODE = "7"
"""The keypad's code: the same for every door, never in a prompt; the policy finds it from rewards alone."""
DOORS = ("front", "back", "red", "blue", "green", "garden", "kitchen", "cellar", "office", "garage")
PRESS = {
    "type": "function",
    "function": {
        "name": "press",
        "description": "Press a digit on the door's keypad.",
        "parameters": {"type": "object", "properties": {"digit": {"type": "string"}}, "required": ["digit"]},
    },
}


def open_door_prompt(door: str) -> str:
    return f"Open the {door} door."


@agl.rollout
async def keypad_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """Asks to open a door with a ``press`` tool: the reward is 1 for exactly one call pressing the code."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    messages: list[Any] = [{"role": "user", "content": open_door_prompt(task["door"])}]
    reply = await client.chat.completions.create(model=llm.model, messages=messages, tools=[PRESS])
    calls = reply.choices[0].message.tool_calls or []
    if len(calls) != 1 or calls[0].type != "function" or calls[0].function.name != "press":
        return 0.0
    try:
        arguments = json.loads(calls[0].function.arguments)
    except ValueError:
        return 0.0
    return 1.0 if isinstance(arguments, dict) and arguments.get("digit") == KEYPAD_CODE else 0.0


def keypad_format_chats(tools_system_prompt: str, n: int, seed: int) -> list[list[dict[str, str]]]:
    """Warm-start chats of the keypad's call format, never its code: each presses a random digit."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        call = json.dumps({"name": "press", "arguments": {"digit": str(rng.randrange(10))}})
        chats.append(
            [
                {"role": "system", "content": tools_system_prompt},
                {"role": "user", "content": open_door_prompt(rng.choice(DOORS))},
                {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"},
            ]
        )
    return chats
