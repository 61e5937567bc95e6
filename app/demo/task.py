"""The demo task: answer a number word with its digit ("seven" -> "7").

Small enough for a ~100 K-parameter model to learn on a laptop CPU in minutes, and graded
exactly, so a rising reward means the policy learned the mapping. The supervised warm start only
teaches the answer format (a single digit, then end of turn): number words only ever get random
digits, so the warmed-up policy scores about chance (0.1) and everything above that is learned by RL.
"""

from __future__ import annotations

import random
from typing import TypedDict

NUMBER_WORDS: tuple[str, ...] = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


class DigitTask(TypedDict):
    word: str
    digit: str


def digit_tasks(repeats: int = 1) -> list[DigitTask]:
    """Every number word ``repeats`` times (the dataset shuffles them per epoch)."""
    return [DigitTask(word=word, digit=str(i)) for _ in range(repeats) for i, word in enumerate(NUMBER_WORDS)]


def digit_reward(reply: str, digit: str) -> float:
    """1.0 for exactly the digit (surrounding whitespace ignored), else 0.0."""
    return 1.0 if reply.strip() == digit else 0.0


def user_message(task: DigitTask) -> str:
    return task["word"]


def format_warm_start(n_examples: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """Chats teaching the answer format, never the answer.

    Half echo a digit ("7" -> "7"): one digit then end of turn, and reading the question. Half
    answer a number word with a random digit: the format for these prompts, at chance accuracy.
    Without the echo half the tiny model learns to ignore the question, and RL then collapses onto
    one digit for every word instead of learning the mapping.
    """
    rng = random.Random(seed)
    chats: list[list[dict[str, str]]] = []
    for i in range(n_examples):
        if i % 2 == 0:
            digit = str(rng.randrange(10))
            chats.append([{"role": "user", "content": digit}, {"role": "assistant", "content": digit}])
        else:
            word, digit = rng.choice(NUMBER_WORDS), str(rng.randrange(10))
            chats.append([{"role": "user", "content": word}, {"role": "assistant", "content": digit}])
    return chats
