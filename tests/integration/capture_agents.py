"""Agents written the way users write them, each with a different client, for the capture tests.

Each asks the policy (``llm.endpoint``) and rewards 1.0 when the reply holds ``task["answer"]``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

import agentlightning as agl
import httpx
import litellm
import openai

Task = dict[str, Any]
rollout = cast(Callable[[Callable[..., Any]], agl.LitAgent[Task]], agl.rollout)


def _reward(task: Task, text: str | None) -> float:
    return 1.0 if task["answer"] in (text or "") else 0.0


@rollout
async def openai_async_agent(task: Task, llm: agl.LLM) -> float:
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
    reply = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}]
    )
    return _reward(task, reply.choices[0].message.content)


@rollout
def openai_sync_agent(task: Task, llm: agl.LLM) -> None:
    client = openai.OpenAI(base_url=llm.endpoint, api_key="unused")
    reply = client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["question"]}])
    agl.emit_reward(_reward(task, reply.choices[0].message.content))


@rollout
async def litellm_agent(task: Task, llm: agl.LLM) -> float:
    """The path CrewAI and many frameworks take: LiteLLM with an OpenAI-compatible base URL."""
    reply = await litellm.acompletion(
        model="openai/" + llm.model,
        api_base=llm.endpoint,
        api_key="unused",
        messages=[{"role": "user", "content": task["question"]}],
    )
    return _reward(task, reply.choices[0].message.content)


@rollout
async def streaming_agent(task: Task, llm: agl.LLM) -> float:
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
    stream = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], stream=True
    )
    text = ""
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    return _reward(task, text)


@rollout
async def raw_http_agent(task: Task, llm: agl.LLM) -> float:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            llm.endpoint.rstrip("/") + "/chat/completions",
            json={"model": llm.model, "messages": [{"role": "user", "content": task["question"]}]},
            headers={"Authorization": "Bearer unused"},
        )
    return _reward(task, response.json()["choices"][0]["message"]["content"])


@rollout
async def multi_turn_agent(task: Task, llm: agl.LLM) -> None:
    """Number guessing: keeps the whole history, appends the reply object the client returned."""
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
    messages: list[Any] = [{"role": "user", "content": task["question"]}]
    turns = int(task.get("turns", 3))
    for turn in range(turns):
        reply = await client.chat.completions.create(model=llm.model, messages=messages)
        message = reply.choices[0].message
        messages.append(message)
        agl.emit_reward(_reward(task, message.content) if turn == turns - 1 else 0.0)
        messages.append({"role": "user", "content": "Not quite. Guess again."})


@rollout
async def helper_agent(task: Task, llm: agl.LLM) -> float:
    """Asks an untrained helper model first (another server), then the policy, then a judge."""
    helper = openai.AsyncOpenAI(base_url=task["helper_url"], api_key="unused")
    hint = await helper.chat.completions.create(model="helper", messages=[{"role": "user", "content": "hint?"}])
    policy = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
    reply = await policy.chat.completions.create(
        model=llm.model,
        messages=[{"role": "user", "content": f"{task['question']} ({hint.choices[0].message.content})"}],
    )
    verdict = await helper.chat.completions.create(
        model="judge", messages=[{"role": "user", "content": json.dumps(reply.choices[0].message.content)}]
    )
    return _reward(task, reply.choices[0].message.content) if verdict.choices else 0.0
