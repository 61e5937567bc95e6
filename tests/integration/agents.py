"""Agents written the way users write them, importable by runner processes."""

from __future__ import annotations

import time

import agentlightning as agl


@agl.rollout
def reward_only(task: dict[str, float], llm: agl.LLM) -> float:
    """Makes no LLM call: its rollouts succeed with an empty trajectory."""
    time.sleep(task.get("sleep_s", 0.0))
    if task.get("fail"):
        raise RuntimeError("the agent failed on purpose")
    return task["reward"]
