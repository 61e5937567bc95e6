"""Number guessing over several turns with OpenAI's Responses API (``client.responses.create``).

The same game as ``examples/multiturn``, written the Responses way: the agent keeps the conversation
as input items, sends the model's ``response.output`` items back followed by the "higher"/"lower"
feedback, and rewards the game at the end. The endpoint turns the items back into the chat it served
and continues it token for token, so the whole game trains as one datum.

Each task: ``{"secret": 7, "low": 1, "high": 10, "max_turns": 3}``.
"""

from __future__ import annotations

from typing import Any

import agentlightning as agl
from openai import AsyncOpenAI

from examples.multiturn.agent import feedback, first_prompt, game_reward, parse_guess

INSTRUCTIONS = "You play a guessing game. Answer with one whole number."


@agl.rollout
async def guess_number_responses(task: dict[str, Any], llm: agl.LLM) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    items: list[Any] = [{"role": "user", "content": first_prompt(task)}]
    max_turns = int(task.get("max_turns", 3))
    for turn in range(1, max_turns + 1):
        response = await client.responses.create(model=llm.model, instructions=INSTRUCTIONS, input=items)
        items += [item.model_dump(exclude_none=True) for item in response.output]  # the reply, as items
        guess = parse_guess(response.output_text)
        if guess == task["secret"]:
            return game_reward(turn, found=True)
        items.append({"role": "user", "content": feedback(guess, task["secret"])})
    return game_reward(max_turns, found=False)
