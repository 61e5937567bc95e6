"""Two-number sums asked of a real pretrained model (SmolLM2-135M-Instruct), graded on the reply's last number.

Written as users write an agent: an ``openai.AsyncOpenAI`` client on the policy's endpoint, one question, the
reward returned. The base model knows many sums but buries them in rambling ("3 + 8 = 11\\n\\nThis is a classic
example of..."), so its last number is often not the sum; RL on held-out pairs measures whether it learns to
answer and stop, which is skill the base model partly has.
"""

from __future__ import annotations

import re
from typing import Any

import agentlightning as agl
from openai import AsyncOpenAI

NUMBER = re.compile(r"-?\d+")


def last_number(reply: str) -> str | None:
    """The reply's last integer, as written (``"11"`` of ``"3 + 8 = 11."``); ``None`` without one."""
    numbers = NUMBER.findall(reply)
    return numbers[-1] if numbers else None


def sum_reward(reply: str, answer: str) -> float:
    """1.0 when the reply's last number is the sum, else 0.0."""
    return 1.0 if last_number(reply) == answer else 0.0


@agl.rollout
async def sum_agent(task: dict[str, str], llm: agl.LLM) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
    reply = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}]
    )
    return sum_reward(reply.choices[0].message.content or "", task["answer"])


@agl.rollout
async def sum_chat_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """Two questions on one chat: the second asked after the model's own answer to the first. Each answer whose
    last number is its sum scores half; both turns train as one trajectory."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
    messages: list[Any] = [{"role": "user", "content": task["question"]}]
    first = await client.chat.completions.create(model=llm.model, messages=messages)
    first_reply = first.choices[0].message.content or ""
    messages += [{"role": "assistant", "content": first_reply}, {"role": "user", "content": task["then_question"]}]
    second = await client.chat.completions.create(model=llm.model, messages=messages)
    second_reply = second.choices[0].message.content or ""
    return (sum_reward(first_reply, task["answer"]) + sum_reward(second_reply, task["then_answer"])) / 2
