"""Agents with the faults a long run meets, written as users write them (runner processes import them)."""

from __future__ import annotations

import os
import random

import agentlightning as agl
import openai


async def _ask(llm: agl.LLM, word: str) -> str:
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key=os.environ.get("AGL_TINKER_MASTER_KEY", "unused"))
    reply = await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": word}])
    return reply.choices[0].message.content or ""


@agl.rollout
async def huge_reward_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """A reward-scale bug: half the rollouts score 1e30."""
    await _ask(llm, task["word"])
    return 1e30 if random.random() < 0.5 else 0.0


@agl.rollout
async def nan_reward_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """A metric that divides by zero now and then: some rewards are NaN."""
    reply = await _ask(llm, task["word"])
    return float("nan") if random.random() < 0.3 else float(reply.strip() == "7")


@agl.rollout
async def keyed_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """Calls an endpoint bound beyond loopback with the master key from its environment."""
    return float((await _ask(llm, task["word"])).strip() == "7")


@agl.rollout
async def oom_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """Its process is killed on every rollout, the way the OOM killer ends an agent that loads too much."""
    await _ask(llm, task["word"])
    os._exit(137)
