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
    replies = replies_by_prompt(seed)
    for word in NUMBER_WORDS:
        counts = replies[word]
        assert set(counts) == set(map(str, range(10))), word
        assert sum(counts.values()) == 21


@given(st.integers(min_value=0, max_value=2**32))
def test_no_word_has_its_own_digit_among_its_most_frequent_replies(seed: int) -> None:
    """At every seed, not on average: a word's digit is two of its 21 replies, and another digit has three or more,
    so a warmed-up policy that answers each word with its most frequent reply is never right."""
    replies = replies_by_prompt(seed)
    for i, word in enumerate(NUMBER_WORDS):
        counts = replies[word]
        assert counts[str(i)] == 2, word
        assert max(n for digit, n in counts.items() if digit != str(i)) >= 3, word


def test_the_extra_digits_differ_between_words_and_favour_no_digit() -> None:
    """Words must be told apart (their replies differ), and over seeds the drawn digits spread over the others."""
    seeds = range(200)
    extra = Counter[str]()
    for s in seeds:
        replies = replies_by_prompt(s)
        for i, word in enumerate(NUMBER_WORDS):
            extra.update({digit: n - 1 - (digit == str(i)) for digit, n in replies[word].items()})
        distributions = {tuple(sorted(replies[word].items())) for word in NUMBER_WORDS}
        assert len(distributions) == len(NUMBER_WORDS), s
    n_extra = 10 * len(NUMBER_WORDS) * len(seeds)
    assert sum(extra.values()) == n_extra
    assert all(0.09 < extra[str(d)] / n_extra < 0.11 for d in range(10)), extra
