"""The demo's warm start teaches the answer format and lets RL find every answer."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from app.demo.task import NUMBER_WORDS, format_warm_start


def replies_by_prompt(seed: int) -> dict[str, Counter[str]]:
    replies: dict[str, Counter[str]] = {}
    for user, assistant in format_warm_start(seed):
        assert (user["role"], assistant["role"]) == ("user", "assistant")
        replies.setdefault(user["content"], Counter())[assistant["content"]] += 1
    return replies


@given(st.integers(min_value=0, max_value=10_000))
def test_every_reply_is_one_digit_and_digits_are_echoed(seed: int) -> None:
    replies = replies_by_prompt(seed)
    assert set(replies) == {*NUMBER_WORDS, *map(str, range(10))}
    for prompt, counts in replies.items():
        assert all(len(reply) == 1 and reply.isdigit() for reply in counts)
        if prompt.isdigit():
            assert counts == Counter({prompt: 20})


@given(st.integers(min_value=0, max_value=10_000))
def test_every_word_gets_every_digit_and_the_same_number_of_replies(seed: int) -> None:
    for word in NUMBER_WORDS:
        counts = replies_by_prompt(seed)[word]
        assert set(counts) == set(map(str, range(10))), word
        assert sum(counts.values()) == 20


def test_the_extra_digits_differ_between_words_and_do_not_favour_the_answer() -> None:
    """Words must be told apart (their replies differ), and the answer gets no more than chance."""
    seeds = range(200)
    extra_for_answer = sum(replies_by_prompt(s)[word][str(i)] - 1 for s in seeds for i, word in enumerate(NUMBER_WORDS))
    n_extra = 10 * len(NUMBER_WORDS) * len(seeds)
    assert 0.07 < extra_for_answer / n_extra < 0.13
    distributions = {tuple(sorted(replies_by_prompt(0)[word].items())) for word in NUMBER_WORDS}
    assert len(distributions) == len(NUMBER_WORDS)
