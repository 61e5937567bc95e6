"""The number-guessing example's rules: the strict reply parse and the warm-start games' legality."""

from __future__ import annotations

import json
import random
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from examples.multiturn import warm_start
from examples.multiturn.agent import parse_guess


def test_a_guess_is_a_reply_that_is_a_number_and_nothing_else() -> None:
    assert [parse_guess(r) for r in ("7", " 7\n", "7.", "-3", "10")] == [7, 7, 7, -3, 10]
    assert [parse_guess(r) for r in ("It is 7", "7 7", "7777777x", "", "seven", "7?")] == [None] * 6


@given(seed=st.integers(0, 2**32 - 1))
def test_every_warm_start_guess_is_one_the_feedback_so_far_allows(seed: int) -> None:
    chat = warm_start.random_game(random.Random(seed))
    assert chat[0]["role"] == "user" and chat[-1]["role"] == "assistant"
    assert [m["role"] for m in chat[1:]] == ["assistant", "user"] * (len(chat) // 2 - 1) + ["assistant"]
    low, high = 1, 10
    for reply, answer in zip(chat[1::2], chat[2::2], strict=False):
        guess = parse_guess(reply["content"])
        assert guess is not None and low <= guess <= high
        assert answer["content"] in ("Higher.", "Lower.")
        low, high = (guess + 1, high) if answer["content"] == "Higher." else (low, guess - 1)
    last = parse_guess(chat[-1]["content"])
    assert last is not None and low <= last <= high
    assert len(chat) <= 6


def test_the_committed_warm_start_file_is_what_the_generator_writes() -> None:
    path = Path(warm_start.__file__).with_name("warm_start.jsonl")
    rng = random.Random(0)
    expected = [{"messages": warm_start.random_game(rng)} for _ in range(warm_start.GAMES)]
    assert [json.loads(line) for line in path.read_text().splitlines()] == expected
