"""Rewards placed by the sequence both sides share, whatever the clocks say."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from domain.reward_order import NumberedCall, NumberedReward, attribute_rewards, last_in_call_order
from domain.trajectory import reconstruct_trajectory
from domain.triplets import RawTriplet


def call(key: str, sequence_id: int, choice: int = 0) -> NumberedCall:
    return NumberedCall(key=key, sequence_id=sequence_id, choice=choice)


class TestAttributeRewards:
    def test_each_reward_goes_to_the_latest_call_numbered_below_it(self) -> None:
        calls = [call("a", 1), call("b", 4), call("c", 7)]
        rewards = [NumberedReward(2, 0.25), NumberedReward(5, 0.5), NumberedReward(6, 0.125), NumberedReward(9, 1.0)]

        placed = attribute_rewards(calls, rewards)

        assert placed.rewards == {"a": 0.25, "b": 0.625, "c": 1.0}
        assert (placed.before_first_call, placed.without_call) == (0, 0)

    def test_a_reward_before_every_call_stays_in_the_return_on_the_first_call_and_is_counted(self) -> None:
        placed = attribute_rewards([call("b", 5), call("a", 3)], [NumberedReward(1, 0.5), NumberedReward(8, 1.0)])

        assert placed.rewards == {"a": 0.5, "b": 1.0}
        assert placed.before_first_call == 1

    def test_without_any_trained_call_a_reward_is_counted_not_placed(self) -> None:
        placed = attribute_rewards([], [NumberedReward(1, 0.5)])

        assert placed.rewards == {} and placed.without_call == 1

    def test_within_one_request_the_higher_choice_takes_it(self) -> None:
        placed = attribute_rewards([call("first", 2, 0), call("second", 2, 1)], [NumberedReward(3, 1.0)])

        assert placed.rewards == {"second": 1.0}


calls_st = st.lists(st.integers(0, 50), unique=True, max_size=8).map(lambda ids: [call(f"c{s}", s) for s in ids])
rewards_st = st.lists(
    st.builds(NumberedReward, st.integers(0, 60), st.floats(-4, 4, allow_nan=False).map(lambda v: round(v, 3))),
    max_size=8,
)


@given(calls_st, rewards_st, st.randoms())
def test_placement_ignores_the_order_of_the_inputs(
    calls: list[NumberedCall], rewards: list[NumberedReward], random: object
) -> None:
    shuffled_calls, shuffled_rewards = list(calls), list(rewards)
    random.shuffle(shuffled_calls)  # type: ignore[attr-defined]
    random.shuffle(shuffled_rewards)  # type: ignore[attr-defined]

    first, second = attribute_rewards(calls, rewards), attribute_rewards(shuffled_calls, shuffled_rewards)

    assert first.rewards.keys() == second.rewards.keys()
    assert all(math.isclose(first.rewards[k], second.rewards[k], abs_tol=1e-9) for k in first.rewards)


@given(calls_st, rewards_st)
def test_no_reward_is_lost_when_there_is_a_call(calls: list[NumberedCall], rewards: list[NumberedReward]) -> None:
    placed = attribute_rewards(calls, rewards)

    if calls:
        assert math.isclose(sum(placed.rewards.values()), sum(r.value for r in rewards), abs_tol=1e-6)
        assert placed.without_call == 0
    else:
        assert placed.without_call == len(rewards)


@given(calls_st, rewards_st)
def test_a_placed_reward_never_goes_to_a_call_numbered_after_it_unless_none_came_before(
    calls: list[NumberedCall], rewards: list[NumberedReward]
) -> None:
    for reward in rewards:
        placed = attribute_rewards(calls, [reward])
        for key in placed.rewards:
            target = next(c for c in calls if c.key == key)
            earlier = [c for c in calls if c.sequence_id < reward.sequence_id]
            if earlier:
                assert target.sequence_id == max(c.sequence_id for c in earlier)
            else:
                assert target.sequence_id == min(c.sequence_id for c in calls)
                assert placed.before_first_call == 1


@given(st.lists(st.one_of(st.none(), st.integers(0, 100)), max_size=10))
def test_the_last_call_is_the_highest_numbered_whatever_the_listing(ids: list[int | None]) -> None:
    last = last_in_call_order(ids)

    if not ids:
        assert last is None
    elif all(i is None for i in ids):
        assert last == len(ids) - 1
    else:
        assert last is not None and ids[last] == max(i for i in ids if i is not None)


def test_the_final_reward_is_read_from_the_call_made_last_not_the_branch_listed_last() -> None:
    """Branch order lists a parallel branch's continuation before the other branch: the last made is in the middle."""

    def turn(sequence_id: int, reward: float | None) -> RawTriplet:
        return RawTriplet(
            prompt={"token_ids": [1, 2]},
            response={"token_ids": [3], "logprobs": [-0.5]},
            reward=reward,
            metadata={"sequence_id": sequence_id},
        )

    rewarded_last = reconstruct_trajectory([turn(2, None), turn(9, 1.0), turn(5, None)])
    unrewarded_last = reconstruct_trajectory([turn(2, 1.0), turn(9, None), turn(5, 1.0)])

    assert not rewarded_last.final_reward_missing
    assert unrewarded_last.final_reward_missing
