"""The agent of the learning check not yet moved to held-out items, written as users write it (``openai`` client,
the tools API): a keypad whose code, one for every door, only a tool call's argument can enter. Its test items are
its training items, and its reward is a bias, not a mapping: ``learning_agents.keypad_agent`` is the held-out
check that replaces it once it learns (bench/README.md, the learning checks per seed).
"""

from __future__ import annotations

import json
import random
from typing import Any

import agentlightning as agl
from openai import AsyncOpenAI

KEYPAD_CODE = "7"
"""The keypad's code: the same for every door, never in a prompt; the policy finds it from rewards alone."""
DOORS = ("front", "back", "red", "blue", "green", "garden", "kitchen", "cellar", "office", "garage")
PRESS = {
    "type": "function",
    "function": {
        "name": "press",
        "description": "Press a digit on the door's keypad.",
        "parameters": {"type": "object", "properties": {"digit": {"type": "string"}}, "required": ["digit"]},
    },
}


def open_door_prompt(door: str) -> str:
    return f"Open the {door} door."


@agl.rollout
async def keypad_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """Asks to open a door with a ``press`` tool: the reward is 1 for exactly one call pressing the code."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    messages: list[Any] = [{"role": "user", "content": open_door_prompt(task["door"])}]
    reply = await client.chat.completions.create(model=llm.model, messages=messages, tools=[PRESS])
    calls = reply.choices[0].message.tool_calls or []
    if len(calls) != 1 or calls[0].type != "function" or calls[0].function.name != "press":
        return 0.0
    try:
        arguments = json.loads(calls[0].function.arguments)
    except ValueError:
        return 0.0
    return 1.0 if isinstance(arguments, dict) and arguments.get("digit") == KEYPAD_CODE else 0.0


def keypad_format_chats(tools_system_prompt: str, n: int, seed: int) -> list[list[dict[str, str]]]:
    """Warm-start chats of the keypad's call format, never its code: each presses a random digit."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        call = json.dumps({"name": "press", "arguments": {"digit": str(rng.randrange(10))}})
        chats.append(
            [
                {"role": "system", "content": tools_system_prompt},
                {"role": "user", "content": open_door_prompt(rng.choice(DOORS))},
                {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"},
            ]
        )
    return chats
