"""The demo's agents, written as users write them (runner processes import them from here)."""

from __future__ import annotations

import functools
import os

import agentlightning as agl
import openai

from app.demo.task import DigitTask, digit_reward, user_message


@functools.cache
def _client() -> openai.AsyncOpenAI:
    """One client per process: building one per rollout costs ~20 ms of CPU (SSL context)."""
    return openai.AsyncOpenAI(base_url="http://127.0.0.1/v1", api_key=os.environ.get("AGL_TINKER_MASTER_KEY", "unused"))


@agl.rollout
async def digit_agent(task: DigitTask, llm: agl.LLM) -> float:
    """Asks the policy for the digit of a number word; reward 1 for exactly that digit."""
    client = _client().with_options(base_url=llm.endpoint)
    reply = await client.chat.completions.create(
        model=llm.model,
        messages=[{"role": "user", "content": user_message(task)}],
    )
    return digit_reward(reply.choices[0].message.content or "", task["digit"])
