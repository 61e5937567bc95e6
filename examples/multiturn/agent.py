"""Number guessing over several turns, written the way Agent-lightning's Tinker example writes it.

The agent keeps the whole chat, appends the model's reply and "higher"/"lower" feedback after each
guess, and rewards the game at the end: 1.0 for finding the number, less for each extra guess,
0.0 when the guesses run out. ``guess_number`` is async (``openai.AsyncOpenAI``, returns the
reward); ``guess_number_sync`` is the same game with the blocking client and ``agl.emit_reward``.

Each task: ``{"secret": 7, "low": 1, "high": 10, "max_turns": 3}``.
"""

from __future__ import annotations

import re
from typing import Any

import agentlightning as agl
from openai import AsyncOpenAI, OpenAI


def first_prompt(task: dict[str, Any]) -> str:
    return (
        f"I am thinking of a whole number between {task['low']} and {task['high']}. "
        "Guess it. Reply with the number only."
    )


def parse_guess(text: str) -> int | None:
    """The guess when the reply is a number and nothing else (as the prompt asks), else None."""
    match = re.fullmatch(r"\s*(-?\d+)\s*\.?\s*", text)
    return int(match.group(1)) if match else None


def feedback(guess: int | None, secret: int) -> str:
    if guess is None:
        return "That is not a number. Reply with the number only."
    return "Higher." if guess < secret else "Lower."


def game_reward(turns_used: int, found: bool) -> float:
    """1.0 for a first-try hit, 0.2 less per extra guess (never below 0.2); 0.0 when not found."""
    return max(0.2, 1.0 - 0.2 * (turns_used - 1)) if found else 0.0


@agl.rollout
async def guess_number(task: dict[str, Any], llm: agl.LLM) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    messages: list[dict[str, Any]] = [{"role": "user", "content": first_prompt(task)}]
    max_turns = int(task.get("max_turns", 3))
    for turn in range(1, max_turns + 1):
        response = await client.chat.completions.create(model=llm.model, messages=messages)
        reply = response.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": reply})
        guess = parse_guess(reply)
        if guess == task["secret"]:
            return game_reward(turn, found=True)
        messages.append({"role": "user", "content": feedback(guess, task["secret"])})
    return game_reward(max_turns, found=False)


@agl.rollout
def guess_number_sync(task: dict[str, Any], llm: agl.LLM) -> None:
    client = OpenAI(base_url=llm.endpoint, api_key="dummy")
    messages: list[Any] = [{"role": "user", "content": first_prompt(task)}]
    max_turns = int(task.get("max_turns", 3))
    for turn in range(1, max_turns + 1):
        response = client.chat.completions.create(model=llm.model, messages=messages)
        message = response.choices[0].message
        messages.append(message)  # the reply object itself, as many agents do
        guess = parse_guess(message.content or "")
        if guess == task["secret"]:
            agl.emit_reward(game_reward(turn, found=True))
            return
        messages.append({"role": "user", "content": feedback(guess, task["secret"])})
    agl.emit_reward(game_reward(max_turns, found=False))
