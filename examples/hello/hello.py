"""The original example's hello agent, written as users write it: asked to say it is ``task``,
the policy earns 1 for "I'm <task>" / "I am <task>", -1 for "not <task>", 0 otherwise."""

from __future__ import annotations

import agentlightning as agl
from openai import OpenAI


@agl.rollout
def hello(task: str, llm: agl.LLM, rollout: agl.Rollout) -> None:
    client = OpenAI(base_url=llm.endpoint, api_key="dummy")  # loopback endpoint: any key
    response = client.chat.completions.create(
        model=llm.model,
        messages=[{"role": "user", "content": f"Let's play a game. Say you are {task}."}],
    )
    content = (response.choices[0].message.content or "").lower()
    if f"i am {task}" in content or f"i'm {task}" in content:
        reward = 1.0
    elif f"not {task}" in content:
        reward = -1.0
    else:
        reward = 0.0
    print(f"[{rollout.rollout_id} {rollout.mode}] {task} -> {content!r} -> {reward}")
    agl.emit_reward(reward)
