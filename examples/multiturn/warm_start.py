"""Writes ``warm_start.jsonl``: games played by the rules with random guesses, never a search strategy.

Each chat is a game against a random secret: every guess is a random number the feedback so far
allows (lower after "Lower.", higher after "Higher."), in the reply format the prompt asks for; one
``{"messages": [...]}`` record a line. A supervised warm start on these teaches the format and the
rules; which guesses find the number soonest is left to RL. ``python -m examples.multiturn.warm_start``
rewrites the file (seeded).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from examples.multiturn.agent import feedback, first_prompt

GAMES = 256


def random_game(rng: random.Random, low: int = 1, high: int = 10, max_turns: int = 3) -> list[dict[str, str]]:
    """One game's chat: random guesses within the bounds the feedback leaves, ending on the last guess."""
    secret = rng.randint(low, high)
    chat = [{"role": "user", "content": first_prompt({"low": low, "high": high})}]
    for turn in range(max_turns):
        guess = rng.randint(low, high)
        chat.append({"role": "assistant", "content": str(guess)})
        if guess == secret or turn == max_turns - 1:
            break
        chat.append({"role": "user", "content": feedback(guess, secret)})
        low, high = (guess + 1, high) if guess < secret else (low, guess - 1)
    return chat


def main() -> None:
    rng = random.Random(0)
    out = Path(__file__).with_name("warm_start.jsonl")
    out.write_text("".join(json.dumps({"messages": random_game(rng)}) + "\n" for _ in range(GAMES)))
    print(f"wrote {GAMES} games to {out}")


if __name__ == "__main__":
    main()
