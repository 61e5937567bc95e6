"""The demo task: answer a number word with its digit ("seven" -> "7").

Small enough for a ~100 K-parameter model to learn on a laptop CPU in minutes, and graded
exactly, so a rising reward means the policy learned the mapping. The supervised warm start only
teaches the answer format (a single digit, then end of turn): a number word's own digit is never
among its most frequent replies, so the warm start does not point greedy decoding at the answer and
what the policy gets right is learned by RL.
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
    """Chats teaching the answer format, never the answer: 410, drawn and shuffled by ``seed``.

    Half echo a digit ("7" -> "7", each digit twenty times): one digit then end of turn, and
    reading the question. Half answer a number word: each word once with every digit and once more
    with its own, plus ten digits drawn from the other nine. The drawn part makes each word's
    replies differ, so the policy must tell the words apart (with every word's digits spread evenly
    it learns to ignore the word, and RL stalls at chance); every digit once keeps each answer
    sampled (with drawn digits alone some words never sample theirs). The own digit's second reply
    gives it the count an average other digit has, so the answer starts neither favoured nor
    shunned (once among twenty replies, the demo reached 0.60 where it had reached 1.00). Drawing
    the ten from the other digits keeps the answer out of every seed's warm start: the own digit
    has two of the word's 21 replies and the other nine share nineteen, so one has three or more
    and greedy decoding after the warm start never favours the answer (drawn from all ten, some
    seeds' words got theirs three or four times and scored 0.2-0.3 before any RL).
    """
    rng = random.Random(seed)
    chats: list[list[dict[str, str]]] = []
    for own, word in enumerate(NUMBER_WORDS):
        others = [d for d in range(10) if d != own]
        for digit in [*range(10), own, *(rng.choice(others) for _ in range(10))]:
            chats.append([{"role": "user", "content": word}, {"role": "assistant", "content": str(digit)}])
    for digit in map(str, range(10)):
        chats.extend([{"role": "user", "content": digit}, {"role": "assistant", "content": digit}] for _ in range(20))
    rng.shuffle(chats)
    return chats
