"""Agents written the way users write them, importable by runner processes."""

from __future__ import annotations

import os
import time

import agentlightning as agl
import openai


@agl.rollout
def reward_only(task: dict[str, float], llm: agl.LLM) -> float:
    """Makes no LLM call: its rollouts succeed with an empty trajectory."""
    time.sleep(task.get("sleep_s", 0.0))
    if task.get("fail"):
        raise RuntimeError("the agent failed on purpose")
    return task["reward"]


@agl.rollout
async def answer_agent(task: dict[str, str], llm: agl.LLM) -> None:
    """Asks the policy the task's question; reward 1.0 when the expected answer is in the reply."""
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused-on-loopback")
    reply = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=16
    )
    agl.emit_reward(1.0 if task["answer"] in (reply.choices[0].message.content or "") else 0.0)


@agl.rollout
def crashing_agent(task: dict[str, float], llm: agl.LLM) -> float:
    """Ends its own process on the tasks that say so, the way a native crash or an OOM kill does."""
    if task.get("crash"):
        os._exit(1)
    return task["reward"]


class TaskRewardAgent(agl.LitAgent[dict[str, float]]):
    """A ``LitAgent`` class as Agent-lightning's examples write theirs (``agent=module:Class`` makes it)."""

    def __init__(self) -> None:
        super().__init__()
        self.trained_agents = "writer"  # what the deprecated constructor argument sets, without its warning

    def rollout(self, task: dict[str, float], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        return task["reward"]


class ConfiguredAgent(agl.LitAgent[dict[str, float]]):
    """A ``LitAgent`` class that cannot be made without arguments."""

    def __init__(self, model_name: str, *, retries: int = 2) -> None:
        super().__init__()
        self.model_name, self.retries = model_name, retries

    def rollout(self, task: dict[str, float], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        return task["reward"]
