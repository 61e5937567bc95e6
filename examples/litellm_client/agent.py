"""An agent that calls the policy through LiteLLM, the way CrewAI, DSPy and many frameworks do.

``litellm.acompletion(model="openai/" + llm.model, api_base=llm.endpoint, ...)`` treats the policy
endpoint as any OpenAI-compatible server. The task is a plain string the model must repeat
exactly; it reaches the agent as the task file writes it (``"007"`` stays the string "007").
"""

from __future__ import annotations

import agentlightning as agl
import litellm


@agl.rollout
async def echo_agent(task: str, llm: agl.LLM) -> float:
    response = await litellm.acompletion(
        model="openai/" + llm.model,
        api_base=llm.endpoint,
        api_key="dummy",
        messages=[{"role": "user", "content": f"Repeat exactly, nothing else: {task}"}],
    )
    reply = response.choices[0].message.content or ""
    return 1.0 if reply.strip() == task else 0.0
