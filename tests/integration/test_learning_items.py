"""The learning checks' items: test items never trained on, each set balanced so that a constant reply scores 0.1
(0.25 for the four door tools)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from tests.integration import learning_agents as la
from tests.integration.learning_checks import CHECKS, tiny_renderer


def prompt(item: dict[str, str]) -> str:
    if "text" in item:
        return item["text"]
    if "verb" in item:
        return la.door_request(item["verb"], item["door"])
    return la.open_door_prompt(item["door"], item["digit"])


def prompts(items: list[dict[str, str]]) -> set[str]:
    return {prompt(item) for item in items}


@pytest.mark.parametrize("split", [la.digit_items, la.door_items])
def test_test_items_are_disjoint_from_training_items_and_balanced_over_the_digits(
    split: Callable[[], tuple[la.Items, la.Items]],
) -> None:
    train, test = split()
    assert (len(train), len(test)) == (80, 20)
    assert not prompts(train) & prompts(test)
    assert Counter(item["digit"] for item in test) == {str(d): 2 for d in range(10)}
    assert Counter(item["digit"] for item in train) == {str(d): 8 for d in range(10)}
    for item in train + test:
        assert item["digit"] in (item["text"] if "text" in item else la.open_door_prompt(item["door"], item["digit"]))


def test_the_door_tools_test_requests_are_never_trained_on_and_ask_each_tool_equally() -> None:
    train, test = la.verb_items()
    assert (len(train), len(test)) == (20, 20)
    assert not prompts(train) & prompts(test)
    per_verb = dict.fromkeys(la.VERBS, 5)
    assert Counter(item["verb"] for item in test) == Counter(item["verb"] for item in train) == per_verb
    assert {tool["function"]["name"] for tool in la.DOOR_TOOLS} == set(la.VERBS)


@pytest.mark.parametrize("name", list(CHECKS))
def test_no_warm_start_chat_holds_a_test_prompt_and_only_the_control_trains_on_a_coin(name: str) -> None:
    files = CHECKS[name].files(tiny_renderer(), 0)
    held_out = prompts(files.test)
    assert all(m["content"] not in held_out for chat in files.warm for m in chat if m["role"] == "user")
    assert all(bool(task.get("coin")) == CHECKS[name].control for task in files.train)


def test_two_item_tasks_ask_each_item_once_first_and_once_second_with_another_digit() -> None:
    for items in la.digit_items():
        tasks = la.two_item_tasks(items)
        assert (
            Counter(t["text"] for t in tasks)
            == Counter(t["then_text"] for t in tasks)
            == Counter(i["text"] for i in items)
        )
        assert all(t["digit"] != t["then_digit"] for t in tasks)
        assert all(t["then_digit"] in t["then_text"] for t in tasks)
