"""The demo task: answer a number word with its digit ("seven" -> "7").

Small enough for a ~100 K-parameter model to learn on a laptop CPU in minutes, and graded
exactly, so a rising reward means the policy learned the mapping. The supervised warm start only
teaches the answer format (a single digit, then end of turn): number words only ever get digits
drawn independently of their own, so the warmed-up policy scores about chance (0.1) and everything
above that is learned by RL.
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


def format_warm_start(seed: int = 0) -> list[list[dict[str, str]]]:
    """Chats teaching the answer format, never the answer: 400, drawn and shuffled by ``seed``.

    Half echo a digit ("7" -> "7", each digit twenty times): one digit then end of turn, and
    reading the question. Half answer a number word with digits drawn independently of its own:
    each word once with every digit plus ten random ones. The random part makes each word's
    replies differ, so the policy must tell the words apart (with every word's digits spread
    evenly it learns to ignore the word, and RL stalls at chance); every digit at least once keeps
    each answer sampled (with random digits alone some words never sample theirs). The warmed-up
    policy is at chance in expectation.
    """
    rng = random.Random(seed)
    chats: list[list[dict[str, str]]] = []
    for word in NUMBER_WORDS:
        for digit in [*range(10), *(rng.randrange(10) for _ in range(10))]:
            chats.append([{"role": "user", "content": word}, {"role": "assistant", "content": str(digit)}])
    for digit in map(str, range(10)):
        chats.extend([{"role": "user", "content": digit}, {"role": "assistant", "content": digit}] for _ in range(20))
    rng.shuffle(chats)
    return chats
