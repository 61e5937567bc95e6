"""Token-in-token-out splicing and turn matching: the invariants of multi-turn prompts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

from domain.multiturn import NormalMessage, PrefixBreak, ServedTurn, match_served_turn, splice_prompt

END = 0
END_IDS = frozenset({END})
body = st.lists(st.integers(min_value=1, max_value=500), max_size=12).map(tuple)


def turn(prompt: tuple[int, ...], sampled: tuple[int, ...], messages: tuple[NormalMessage, ...] = ()) -> ServedTurn:
    reply = NormalMessage("assistant", "r")
    return ServedTurn(messages=messages, tools="", prompt=prompt, sampled=sampled, reply=reply)


@given(prompt=body, sampled=body, ends=st.booleans(), rendered_prefix=body, retokenised=body, suffix=body)
def test_the_spliced_prompt_extends_the_previous_prompt_and_sample(
    prompt: tuple[int, ...],
    sampled: tuple[int, ...],
    ends: bool,
    rendered_prefix: tuple[int, ...],
    retokenised: tuple[int, ...],
    suffix: tuple[int, ...],
) -> None:
    action = (*sampled, END) if ends else sampled
    full = (*rendered_prefix, *retokenised, END, *suffix)

    spliced = splice_prompt(turn(prompt, action), rendered_prefix, full, END_IDS).unwrap()

    assert spliced[: len(prompt) + len(action)] == (*prompt, *action)
    assert spliced[len(prompt) + len(action) :] == ((*suffix,) if ends else (END, *suffix))


@given(prefix=body, reply=body, suffix=body)
def test_when_the_renderer_retokenises_exactly_the_splice_is_the_plain_render(
    prefix: tuple[int, ...], reply: tuple[int, ...], suffix: tuple[int, ...]
) -> None:
    full = (*prefix, *reply, END, *suffix)
    assert splice_prompt(turn(prefix, (*reply, END)), prefix, full, END_IDS) == Success(full)


@given(prefix=body.filter(bool), reply=body, suffix=body)
def test_a_render_that_does_not_extend_the_shorter_one_is_a_break(
    prefix: tuple[int, ...], reply: tuple[int, ...], suffix: tuple[int, ...]
) -> None:
    changed = (prefix[0] + 1, *prefix[1:])
    full = (*changed, *reply, END, *suffix)
    assert splice_prompt(turn(prefix, reply), prefix, full, END_IDS) == Failure(PrefixBreak.RENDER_NOT_PREFIX)
    assert splice_prompt(turn(prefix, reply), prefix, (*prefix, *reply), END_IDS) == Failure(
        PrefixBreak.NO_END_OF_REPLY
    )


USER = NormalMessage("user", "guess")
REPLY = NormalMessage("assistant", "r")


def test_the_latest_served_turn_that_the_history_continues_is_matched() -> None:
    first = turn((1,), (2, END), (USER,))
    second = ServedTurn(messages=(USER, REPLY, USER), tools="", prompt=(1, 2, END, 3), sampled=(4, END), reply=REPLY)
    history = (USER, REPLY, USER, REPLY, USER)
    match match_served_turn(history, "", [first, second]):
        case Success(found) if found is not None:
            assert found.turn is second and found.n_prefix_messages == 3
        case other:
            raise AssertionError(other)


def test_first_turns_match_nothing_and_unknown_assistant_messages_are_edits() -> None:
    served = [turn((1,), (2, END), (USER,))]
    assert match_served_turn((USER,), "", served) == Success(None)
    edited = (USER, NormalMessage("assistant", "something else"), USER)
    assert match_served_turn(edited, "", served) == Failure(PrefixBreak.HISTORY_EDITED)
    assert match_served_turn((USER, REPLY, USER), "[tools]", served) == Failure(PrefixBreak.TOOLS_CHANGED)
