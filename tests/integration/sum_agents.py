"""The arithmetic example's negative control: its agent's questions, rewards that do not depend on the reply.

A training task marked ``"coin": true`` is rewarded by a fair coin, whatever the reply; a test task is graded as
``examples.arithmetic.agent.sum_agent`` grades it. The policy is updated as often and as hard as the real task's,
so only rewards that depend on the reply can raise its held-out sums.
"""

from __future__ import annotations

import random
from typing import Any

import agentlightning as agl
from openai import AsyncOpenAI

from examples.arithmetic.agent import sum_reward


@agl.rollout
async def coin_sum_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
    reply = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}]
    )
    if task.get("coin"):
        return float(random.random() < 0.5)
    return sum_reward(reply.choices[0].message.content or "", task["answer"])
