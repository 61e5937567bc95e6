"""Writes ``tasks.jsonl`` and ``test_tasks.jsonl``: sums of two numbers from 1 to 20, split by unordered pair.

``python -m examples.arithmetic.tasks``. A pair and its swap ({3, 8}: "3 + 8" and "8 + 3") fall on the same side,
so no test question is a training question written the other way round.
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


def main() -> None:
    pairs = [(a, b) for a in range(1, 21) for b in range(a, 21)]
    random.Random(0).shuffle(pairs)
    test, train = pairs[:TEST_PAIRS], pairs[TEST_PAIRS:]
    for name, chosen in (("tasks.jsonl", train), ("test_tasks.jsonl", test)):
        records = [q for pair in chosen for q in questions(*pair)]
        (HERE / name).write_text("".join(json.dumps(r) + "\n" for r in records))
        print(f"{name}: {len(records)} questions from {len(chosen)} pairs")


if __name__ == "__main__":
    main()
