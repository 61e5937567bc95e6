"""Writes the calculator's one-digit questions and ``warm_start.jsonl``, exchanges that call either tool.

Every question is ``What is A + B?`` or ``What is A * B?`` with A and B from 1 to 9 (pairs where both
operators give the same number are left out); ten of them, five of each operator, are the test set. Each
warm-start record is a whole exchange in OpenAI's chat fine-tuning format, with the agent's ``SYSTEM`` and
``TOOLS``: the question, a call with the question's operands to a tool, the tool's result, and that result as
the final answer; every question comes once with each tool. A supervised warm start on these teaches the call
format, copying the operands and reporting the result, and no preference between the tools: which tool an
operator needs is left to RL, so the warmed-up policy scores about half. ``python -m examples.tools.warm_start``
rewrites the three files (seeded).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from examples.tools.agent import SYSTEM, TOOLS

OPERATORS = {"+": ("add", lambda a, b: a + b), "*": ("multiply", lambda a, b: a * b)}
Question = tuple[int, str, int]


def questions() -> list[Question]:
    """Every one-digit question whose answer tells the operators apart."""
    return [(a, op, b) for op in OPERATORS for a in range(1, 10) for b in range(1, 10) if a + b != a * b]


def ask(question: Question) -> str:
    a, op, b = question
    return f"What is {a} {op} {b}?"


def task(question: Question) -> dict[str, Any]:
    a, op, b = question
    return {"question": ask(question), "answer": OPERATORS[op][1](a, b)}


def exchange(question: Question, tool: str, number: int) -> dict[str, Any]:
    """One exchange: the question's operands sent to ``tool``, whose result is the final answer."""
    a, _op, b = question
    result = str(a + b if tool == "add" else a * b)
    arguments = json.dumps({"a": a, "b": b})
    call = {"id": f"call_{number}", "type": "function", "function": {"name": tool, "arguments": arguments}}
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": ask(question)},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": result},
        {"role": "assistant", "content": result},
    ]
    return {"messages": messages, "tools": TOOLS}


def split(rng: random.Random) -> tuple[list[Question], list[Question]]:
    """Training and test questions: five of each operator held out."""
    every = questions()
    test = [q for op in OPERATORS for q in rng.sample([q for q in every if q[1] == op], 5)]
    return [q for q in every if q not in test], test


def contents() -> dict[str, list[Any]]:
    """The three files' records by file name, from a fixed seed."""
    rng = random.Random(0)
    train, test = split(rng)
    pairs = [(q, tool) for q in questions() for tool in ("add", "multiply")]
    chats = [exchange(q, tool, number) for number, (q, tool) in enumerate(pairs)]
    rng.shuffle(chats)
    return {
        "tasks.jsonl": [task(q) for q in train],
        "test_tasks.jsonl": [task(q) for q in test],
        "warm_start.jsonl": chats,
    }


def main() -> None:
    here = Path(__file__).parent
    for name, records in contents().items():
        (here / name).write_text("".join(json.dumps(r) + "\n" for r in records))
        print(f"wrote {len(records)} records to {here / name}")


if __name__ == "__main__":
    main()
