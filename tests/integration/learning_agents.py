"""Agents the learning checks train, written as users write them (``openai`` client, the tools API), and their tasks.

Every check's task carries its answer in the prompt: a digit between two filler words ("maybe 7 thanks" -> "7"),
once two items on one chat (each turn graded), once pressed through a tool call. A policy learns the mapping (find
the digit and say it), not one reply: a constant reply scores 0.1 on the balanced test sets. Training and test items are
disjoint (no test prompt is ever trained on), so a rise in the test reward is a rule that generalises, not items
remembered. ``coin_agent`` is the negative control: the same task with a reward that does not depend on the reply.
"""

from __future__ import annotations

import json
import random
from typing import Any

import agentlightning as agl
from openai import AsyncOpenAI

FILLERS = ("hello", "answer", "number", "guess", "higher", "lower", "tool", "call")
FILLERS += ("result", "think", "yes", "no", "maybe", "done", "thanks", "the")
"""Words around the digit: chat words the tiny model's tokenizer was built from, none a number."""
DOORS = ("front", "back", "red", "blue", "green", "garden", "kitchen", "cellar", "office", "garage")
SPLIT_SEED = 1234
"""Fixes which items are test items; the same for every run seed, so seeds vary training, not the split."""


def digit_items(n_train: int = 80, n_test: int = 20) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Disjoint training and test items ``{"text": "<word> <digit> <word>", "digit": ...}``, each set balanced
    over the ten digits (a constant reply scores 0.1)."""
    rng = random.Random(SPLIT_SEED)
    pairs = [(a, b) for a in FILLERS for b in FILLERS if a != b]
    per_digit = [rng.sample(pairs, (n_train + n_test) // 10) for _ in range(10)]
    items = [[{"text": f"{a} {d} {b}", "digit": str(d)} for a, b in per_digit[d]] for d in range(10)]
    test = [item for d in range(10) for item in items[d][: n_test // 10]]
    train = [item for d in range(10) for item in items[d][n_test // 10 :]]
    return train, test


def door_items(n_test: int = 20) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Every (door, code digit) pair, ``n_test`` of them held out: two codes per door, each digit twice."""
    rng = random.Random(SPLIT_SEED)
    shift = rng.randrange(10)
    held = {(door, (i + shift + k * 5) % 10) for i, door in enumerate(DOORS) for k in range(n_test // 10)}
    items = [((door, d) in held, {"door": door, "digit": str(d)}) for door in DOORS for d in range(10)]
    return [item for is_test, item in items if not is_test], [item for is_test, item in items if is_test]


def _digit_reward(reply: str | None, digit: str) -> float:
    return 1.0 if (reply or "").strip() == digit else 0.0


@agl.rollout
async def find_digit_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """Asks with the item's text; reward 1 for replying exactly its digit."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    reply = await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["text"]}])
    return _digit_reward(reply.choices[0].message.content, task["digit"])


@agl.rollout
async def coin_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """The negative control: asks as ``find_digit_agent`` does, but a training task (``"coin": true``) is rewarded
    by a fair coin, whatever the reply; test tasks are graded as ``find_digit_agent`` grades them. The policy is
    updated as often and as hard as the real task's, so only rewards that depend on the reply can raise the test
    reward."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    reply = await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["text"]}])
    if task.get("coin"):
        return float(random.random() < 0.5)
    return _digit_reward(reply.choices[0].message.content, task["digit"])


@agl.rollout
async def two_items_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """Two items on one chat: the first item's text, the policy's reply, then the second item's text and a second
    reply. Each reply that is its own item's digit scores half; both turns train as one datum."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    messages: list[Any] = [{"role": "user", "content": task["text"]}]
    first = await client.chat.completions.create(model=llm.model, messages=messages)
    messages += [{"role": "assistant", "content": first.choices[0].message.content or ""}]
    messages += [{"role": "user", "content": task["then_text"]}]
    second = await client.chat.completions.create(model=llm.model, messages=messages)
    first_reward = _digit_reward(first.choices[0].message.content, task["digit"])
    return (first_reward + _digit_reward(second.choices[0].message.content, task["then_digit"])) / 2


PRESS = {
    "type": "function",
    "function": {
        "name": "press",
        "description": "Press a digit on the door's keypad.",
        "parameters": {"type": "object", "properties": {"digit": {"type": "string"}}, "required": ["digit"]},
    },
}


def open_door_prompt(door: str, digit: str) -> str:
    return f"Open the {door} door with {digit}"


@agl.rollout
async def keypad_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """Asks to open a door whose code is in the prompt, with a ``press`` tool: the reward is 1 for exactly one call
    pressing that code."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    messages: list[Any] = [{"role": "user", "content": open_door_prompt(task["door"], task["digit"])}]
    reply = await client.chat.completions.create(model=llm.model, messages=messages, tools=[PRESS])
    calls = reply.choices[0].message.tool_calls or []
    if len(calls) != 1 or calls[0].type != "function" or calls[0].function.name != "press":
        return 0.0
    try:
        arguments = json.loads(calls[0].function.arguments)
    except ValueError:
        return 0.0
    return 1.0 if isinstance(arguments, dict) and arguments.get("digit") == task["digit"] else 0.0


READ_CODE = {
    "type": "function",
    "function": {
        "name": "read_code",
        "description": "Read the code of the door's keypad.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}


def ask_door_prompt(door: str) -> str:
    return f"What is the code of the {door} door?"


@agl.rollout
async def code_reader_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """Asks for a door's code with a ``read_code`` tool whose result is the code: reward 1 for exactly one call of
    the tool, then a reply that is the code it returned. Both turns are the policy's; the reply must follow the
    tool's result, which differs from task to task."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    messages: list[Any] = [{"role": "user", "content": ask_door_prompt(task["door"])}]
    first = await client.chat.completions.create(model=llm.model, messages=messages, tools=[READ_CODE])
    calls = first.choices[0].message.tool_calls or []
    if len(calls) != 1 or calls[0].type != "function" or calls[0].function.name != "read_code":
        return 0.0
    messages += [first.choices[0].message.model_dump(exclude_none=True)]
    messages += [{"role": "tool", "tool_call_id": calls[0].id, "content": task["digit"]}]
    second = await client.chat.completions.create(model=llm.model, messages=messages, tools=[READ_CODE])
    return _digit_reward(second.choices[0].message.content, task["digit"])


VERBS = ("open", "lock", "knock", "paint")
"""What the user asks done to a door, each its own tool (names that differ in their first token)."""
DOOR_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": verb,
            "description": f"{verb.capitalize()} a door.",
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
    }
    for verb in VERBS
]


def verb_items(n_test_doors: int = 5) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Every (verb, door) pair, ``n_test_doors`` doors of each verb held out (a different set per verb), so both
    sets hold every verb equally often (a constant tool scores 0.25)."""
    rng = random.Random(SPLIT_SEED)
    train: list[dict[str, str]] = []
    test: list[dict[str, str]] = []
    for verb in VERBS:
        held = set(rng.sample(DOORS, n_test_doors))
        for door in DOORS:
            (test if door in held else train).append({"verb": verb, "door": door})
    return train, test


def door_request(verb: str, door: str) -> str:
    return f"{verb} the {door} door"


@agl.rollout
async def door_tools_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """Asks for something done to a door, with one tool per verb: the reward is 1 for exactly one call, of the
    tool the request names."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    messages: list[Any] = [{"role": "user", "content": door_request(task["verb"], task["door"])}]
    reply = await client.chat.completions.create(model=llm.model, messages=messages, tools=DOOR_TOOLS)
    calls = reply.choices[0].message.tool_calls or []
    return 1.0 if len(calls) == 1 and calls[0].type == "function" and calls[0].function.name == task["verb"] else 0.0


Chat = list[dict[str, str]]
Items = list[dict[str, str]]


def digit_format_chats(items: list[dict[str, str]], n: int, seed: int) -> list[Chat]:
    """Warm-start chats of the answer format, never the answer: training prompts, each with a random digit."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        item = rng.choice(items)
        chats.append(
            [{"role": "user", "content": item["text"]}, {"role": "assistant", "content": str(rng.randrange(10))}]
        )
    return chats


def two_item_tasks(items: list[dict[str, str]]) -> list[dict[str, str]]:
    """Each item once first and once second in a two-item task, its partner about half the list away (a digit
    other than its own where the items are sorted by digit); the tasks stay balanced over the digits."""
    shift = len(items) // 2 + 1
    return [
        {**item, "then_text": partner["text"], "then_digit": partner["digit"]}
        for item, partner in zip(items, items[shift:] + items[:shift], strict=True)
    ]


def two_item_format_chats(tasks: list[dict[str, str]], n: int, seed: int) -> list[Chat]:
    """Warm-start chats of the two-item format, never its answers: a random digit after each text."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        task = rng.choice(tasks)
        chats.append(
            [
                {"role": "user", "content": task["text"]},
                {"role": "assistant", "content": str(rng.randrange(10))},
                {"role": "user", "content": task["then_text"]},
                {"role": "assistant", "content": str(rng.randrange(10))},
            ]
        )
    return chats


def keypad_format_chats(tools_system_prompt: str, items: list[dict[str, str]], n: int, seed: int) -> list[Chat]:
    """Warm-start chats of the keypad's call format, never its code: each presses a random digit."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        item = rng.choice(items)
        call = json.dumps({"name": "press", "arguments": {"digit": str(rng.randrange(10))}})
        chats.append(
            [
                {"role": "system", "content": tools_system_prompt},
                {"role": "user", "content": open_door_prompt(item["door"], item["digit"])},
                {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"},
            ]
        )
    return chats


def code_reader_format_chats(items: list[dict[str, str]], n: int, seed: int) -> list[list[dict[str, Any]]]:
    """Warm-start chats (OpenAI messages, to train beside the ``read_code`` tool) of the code reader's two turns,
    never its answer: the call, the tool's result, then a random digit."""
    rng = random.Random(seed)
    chats: list[list[dict[str, Any]]] = []
    for i in range(n):
        item = rng.choice(items)
        call = {"id": f"call_{i}", "type": "function", "function": {"name": "read_code", "arguments": "{}"}}
        chats.append(
            [
                {"role": "user", "content": ask_door_prompt(item["door"])},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": item["digit"]},
                {"role": "assistant", "content": str(rng.randrange(10))},
            ]
        )
    return chats


def door_tools_format_chats(items: list[dict[str, str]], n: int, seed: int) -> list[list[dict[str, Any]]]:
    """Warm-start chats (OpenAI messages, to train beside ``DOOR_TOOLS``) of the call format, never its answer: each
    calls a random tool."""
    rng = random.Random(seed)
    chats: list[list[dict[str, Any]]] = []
    for i in range(n):
        item = rng.choice(items)
        call = {"id": f"call_{i}", "type": "function", "function": {"name": rng.choice(VERBS), "arguments": "{}"}}
        chats.append(
            [
                {"role": "user", "content": door_request(item["verb"], item["door"])},
                {"role": "assistant", "content": "", "tool_calls": [call]},
            ]
        )
    return chats


@agl.rollout
async def find_digit_tools_agent(task: dict[str, str], llm: agl.LLM) -> float:
    """``find_digit_agent`` with a tool declared and never needed: the same task after a tools prompt."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    reply = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["text"]}], tools=[PRESS]
    )
    return _digit_reward(reply.choices[0].message.content, task["digit"])
