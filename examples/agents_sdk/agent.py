"""An OpenAI Agents SDK agent (``openai-agents``) with a function tool, on its default model: the Responses API.

``Agent`` + ``Runner.run`` as the SDK's quickstart writes them; the model is the SDK's default
``OpenAIResponsesModel`` pointed at the policy endpoint (``llm.endpoint``), so every step is a
``POST .../responses`` carrying the run's items (the question, the model's function calls, the
tools' outputs). The SDK runs ``add``/``multiply`` itself and asks again until the model answers;
the answer is rewarded 1.0 when its last number is right. The endpoint continues each step token
for token, so the whole run trains as one datum. The SDK's tracing (an upload to OpenAI) is off.

The SDK is not in the project's lock: install it beside it with
``pip install --no-deps openai-agents==0.24.0 griffelib`` (see ``examples/README.md``).

Each task: ``{"question": "What is 12 + 30?", "answer": 42}``.
"""

from __future__ import annotations

from typing import Any

import agentlightning as agl
from agents import (
    Agent,
    MaxTurnsExceeded,
    ModelBehaviorError,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
)
from openai import AsyncOpenAI

from examples.tools.agent import SYSTEM, final_reward


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@function_tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@agl.rollout
async def agents_sdk_calculator(task: dict[str, Any], llm: agl.LLM) -> float:
    model = OpenAIResponsesModel(model=llm.model, openai_client=AsyncOpenAI(base_url=llm.endpoint, api_key="dummy"))
    agent = Agent(name="calculator", instructions=SYSTEM, model=model, tools=[add, multiply])
    try:
        result = await Runner.run(
            agent,
            task["question"],
            max_turns=int(task.get("max_steps", 4)),
            run_config=RunConfig(tracing_disabled=True),
        )
    except (MaxTurnsExceeded, ModelBehaviorError):  # out of turns, or a tool call the SDK cannot run: no answer
        return 0.0
    return final_reward(str(result.final_output or ""), task["answer"])
