"""Agents the training tests run (runner processes import them by reference)."""

from __future__ import annotations

import functools

import agentlightning as agl
import openai


@functools.cache
def _client() -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://127.0.0.1/v1", api_key="unused-on-loopback")


@agl.rollout
async def always_seven_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """Rewards the reply "7" whatever the question: a target a tiny policy learns in a few batches."""
    reply = (
        await _client()
        .with_options(base_url=llm.endpoint)
        .chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["word"]}])
    )
    return 1.0 if (reply.choices[0].message.content or "").strip() == "7" else 0.0


@agl.rollout
async def failing_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """Raises before calling the model, as a buggy agent does: every rollout fails."""
    raise TypeError(f"boom on {task['word']!r}")


@agl.rollout
async def forgetful_agent(task: dict[str, str], llm: agl.LLM) -> None:
    """Asks the model and judges the reply, but forgets to return or emit the reward: every rollout succeeds."""
    reply = (
        await _client()
        .with_options(base_url=llm.endpoint)
        .chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["word"]}])
    )
    _reward = 1.0 if (reply.choices[0].message.content or "").strip() == "7" else 0.0


FIRST_TURN_REWARDS, SECOND_TURN_REWARDS = (0.1, 0.2), (1.0, 2.0)


@agl.rollout
async def rewarded_each_turn_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """Two turns, a reward for each: the first emitted after the first reply, the second returned at the end.

    Each turn's reward comes from its own set (``FIRST_TURN_REWARDS``, ``SECOND_TURN_REWARDS``, picked by the
    reply's length), so a trajectory shows which call each reward went to.
    """
    client = _client().with_options(base_url=llm.endpoint)
    messages: list[dict[str, str]] = [{"role": "user", "content": task["word"]}]
    first = (await client.chat.completions.create(model=llm.model, messages=messages)).choices[0].message.content
    agl.emit_reward(FIRST_TURN_REWARDS[len(first or "") % 2])
    messages += [{"role": "assistant", "content": first or ""}, {"role": "user", "content": "and again"}]
    second = (await client.chat.completions.create(model=llm.model, messages=messages)).choices[0].message.content
    return SECOND_TURN_REWARDS[len(second or "") % 2]
