"""Writes ``tasks.jsonl`` and ``test_tasks.jsonl``: sums of two numbers from 1 to 20, split by unordered pair; and
``chat_tasks.jsonl`` and ``chat_test_tasks.jsonl``: the same questions two to a chat (``sum_chat_agent``).

``python -m examples.arithmetic.tasks``. A pair and its swap ({3, 8}: "3 + 8" and "8 + 3") fall on the same side,
so no test question is a training question written the other way round. In the chats each question is asked once
first and once second, its partner from the same side, about half the list away.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
TEST_PAIRS = 40


def questions(a: int, b: int) -> list[dict[str, str]]:
    orders = {(a, b), (b, a)}
    return [{"question": f"What is {x} + {y}?", "answer": str(x + y)} for x, y in sorted(orders)]


def chats(records: list[dict[str, str]]) -> list[dict[str, str]]:
    """Each question with a second one, ``len // 2 + 1`` further along the list (wrapping)."""
    shift = len(records) // 2 + 1
    partners = records[shift:] + records[:shift]
    return [
        {**r, "then_question": p["question"], "then_answer": p["answer"]}
        for r, p in zip(records, partners, strict=True)
    ]


def main() -> None:
    pairs = [(a, b) for a in range(1, 21) for b in range(a, 21)]
    random.Random(0).shuffle(pairs)
    test, train = pairs[:TEST_PAIRS], pairs[TEST_PAIRS:]
    for prefix, chosen in (("", train), ("test_", test)):
        records = [q for pair in chosen for q in questions(*pair)]
        for name, rows in ((f"{prefix}tasks.jsonl", records), (f"chat_{prefix}tasks.jsonl", chats(records))):
            (HERE / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
            print(f"{name}: {len(rows)} tasks from {len(chosen)} pairs")


if __name__ == "__main__":
    main()
