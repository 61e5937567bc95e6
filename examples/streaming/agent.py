"""An agent that streams the reply (``stream=True``) and assembles the text from the deltas.

The task is a plain word; the model is asked how many letters it has and earns 1.0 for the right
count. Streaming changes nothing for training: the policy endpoint records the tokens it served.
"""

from __future__ import annotations

import re

import agentlightning as agl
from openai import AsyncOpenAI


@agl.rollout
async def letter_count_agent(task: str, llm: agl.LLM) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    stream = await client.chat.completions.create(
        model=llm.model,
        messages=[{"role": "user", "content": f"How many letters are in the word {task!r}? Reply with a number."}],
        stream=True,
    )
    parts: list[str] = []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    numbers = re.findall(r"\d+", "".join(parts))
    return 1.0 if numbers and int(numbers[0]) == len(task) else 0.0
