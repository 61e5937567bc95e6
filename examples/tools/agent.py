"""A tool-calling agent: the OpenAI ``tools=[...]`` API, tools run locally, then a final answer.

The model gets a calculator (``add``, ``multiply``) and an arithmetic question. Whenever its reply
holds ``tool_calls`` the agent runs each call, sends the results back as ``{"role": "tool",
"tool_call_id": ..., "content": ...}`` messages and asks again; a reply without tool calls is the
final answer, rewarded 1.0 when it holds the right number. The whole exchange is one trajectory.

Each task: ``{"question": "What is 12 + 30?", "answer": 42}``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import agentlightning as agl
from openai import AsyncOpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "multiply",
            "description": "Multiply two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
]

SYSTEM = "You are a careful calculator. Use the tools for arithmetic, then state the result."


def run_tool(name: str, arguments: str) -> str:
    """Run one call locally; errors go back to the model as the tool's output."""
    try:
        args = json.loads(arguments or "{}")
        a, b = int(args["a"]), int(args["b"])
    except (ValueError, KeyError, TypeError) as error:
        return f"error: bad arguments {arguments!r} ({error})"
    if name == "add":
        return str(a + b)
    if name == "multiply":
        return str(a * b)
    return f"error: no tool named {name!r}"


def final_reward(answer: str, expected: int) -> float:
    numbers = re.findall(r"-?\d+", answer)
    return 1.0 if numbers and int(numbers[-1]) == expected else 0.0


@agl.rollout
async def calculator_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": task["question"]},
    ]
    for _ in range(int(task.get("max_steps", 4))):
        response = await client.chat.completions.create(model=llm.model, messages=messages, tools=TOOLS)
        message = response.choices[0].message
        if not message.tool_calls:
            return final_reward(message.content or "", task["answer"])
        messages.append(message)
        for call in message.tool_calls:
            result = run_tool(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return 0.0  # no final answer within max_steps
