"""Agents the learning checks train, written as users write them (``openai`` client, the tools API).

Each asks the demo's question (a number word) in another shape, so the tiny model can learn it within a
few dozen batches: here the answer only counts in a second turn.
"""

from __future__ import annotations

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
