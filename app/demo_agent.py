"""The demo's agent, written as users write them (imported by runners, so it lives in a module)."""

from __future__ import annotations

import agentlightning as agl


@agl.rollout
def parity_agent(task: dict[str, int], llm: agl.LLM) -> float:
    """Rewards even task numbers; fails on multiples of 7 (to show failed-rollout accounting).

    It makes no LLM call yet: until the policy endpoint lands its trajectories are empty, which
    the demo reports as such.
    """
    if task["n"] % 7 == 0:
        raise ValueError(f"task {task['n']} fails on purpose")
    return 1.0 if task["n"] % 2 == 0 else 0.0
