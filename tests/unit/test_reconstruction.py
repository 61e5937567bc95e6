"""Properties and examples of rebuilding transitions from triplets (pure domain)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from domain.rejections import RejectionReason
from domain.trajectory import METRIC_FINAL_STEP, METRIC_NOT_NULL, RewardPolicy, reconstruct_trajectory
from domain.triplets import RawTriplet, parse_triplet
from tests.strategies import any_triplet, bad_triplet, garbage_triplet, good_triplet


def triplet(prompt: list[int], response: list[int], reward: float | None = None) -> RawTriplet:
    return RawTriplet(
        prompt={"token_ids": prompt},
        response={"token_ids": response, "logprobs": [{"logprob": -0.5} for _ in response]},
        reward=reward,
    )


class TestProperties:
    @given(st.lists(any_triplet, max_size=8))
    def test_every_triplet_is_kept_or_rejected_exactly_once(self, triplets: list[RawTriplet]) -> None:
        result = reconstruct_trajectory(triplets)
        assert len(result.transitions) + len(result.rejections) == len(triplets) == result.n_triplets
        assert len({r.index for r in result.rejections}) == len(result.rejections)

    @given(st.lists(any_triplet, max_size=8))
    def test_exactly_one_episode_done_on_the_last_kept_transition(self, triplets: list[RawTriplet]) -> None:
        result = reconstruct_trajectory(triplets)
        done = [t.episode_done for t in result.transitions]
        assert done == ([False] * (len(done) - 1) + [True] if done else [])

    @given(st.lists(any_triplet, max_size=8))
    def test_order_and_token_content_are_preserved(self, triplets: list[RawTriplet]) -> None:
        result = reconstruct_trajectory(triplets)
        rejected = {r.index for r in result.rejections}
        kept_inputs = [t for i, t in enumerate(triplets) if i not in rejected]
        assert len(kept_inputs) == len(result.transitions)
        for raw, transition in zip(kept_inputs, result.transitions, strict=True):
            assert isinstance(raw.prompt, dict) and isinstance(raw.response, dict)
            assert list(transition.ob) == raw.prompt["token_ids"]
            assert list(transition.ac) == raw.response["token_ids"]
            assert list(transition.logprobs) == [e["logprob"] for e in raw.response["logprobs"]]

    @given(st.lists(any_triplet, max_size=8))
    def test_total_reward_equals_the_sum_of_usable_rewards(self, triplets: list[RawTriplet]) -> None:
        result = reconstruct_trajectory(triplets, RewardPolicy(missing_reward=0.0))
        usable = [
            float(t.reward)
            for t in triplets
            if isinstance(t.reward, float | int) and not isinstance(t.reward, bool) and math.isfinite(t.reward)
        ]
        if result.transitions:
            assert math.isclose(result.total_reward, sum(usable), abs_tol=1e-9)

    @given(st.lists(bad_triplet(), min_size=1, max_size=6))
    def test_broken_triplets_are_all_rejected_with_a_reason(self, triplets: list[RawTriplet]) -> None:
        result = reconstruct_trajectory(triplets)
        assert result.is_empty
        assert all(isinstance(r.reason, RejectionReason) for r in result.rejections)

    @given(st.lists(garbage_triplet, max_size=6))
    def test_arbitrary_garbage_never_raises(self, triplets: list[RawTriplet]) -> None:
        result = reconstruct_trajectory(triplets)
        assert result.n_triplets == len(triplets)

    @given(good_triplet())
    def test_logprobs_always_match_action_length(self, raw: RawTriplet) -> None:
        turn = parse_triplet(0, raw).unwrap()
        assert len(turn.response_logprobs) == len(turn.response_tokens)


class TestSeedBehaviour:
    def test_missing_intermediate_reward_is_zero_and_flagged_not_null(self) -> None:
        result = reconstruct_trajectory([triplet([1], [2]), triplet([1, 2, 3], [4], reward=1.0)])
        assert [t.reward for t in result.transitions] == [0.0, 1.0]
        assert [t.metrics[METRIC_NOT_NULL] for t in result.transitions] == [0.0, 1.0]
        assert result.transitions[-1].metrics[METRIC_FINAL_STEP] == 1.0
        assert METRIC_FINAL_STEP not in result.transitions[0].metrics
        assert not result.final_reward_missing

    def test_missing_reward_uses_the_policy_value(self) -> None:
        result = reconstruct_trajectory([triplet([1], [2]), triplet([3], [4])], RewardPolicy(missing_reward=-0.5))
        assert [t.reward for t in result.transitions] == [-0.5, -0.5]
        assert result.final_reward_missing

    def test_episode_done_moves_to_last_kept_when_last_triplet_is_skipped(self) -> None:
        broken_last = RawTriplet(prompt={"token_ids": [5]}, response={"token_ids": []}, reward=1.0)
        result = reconstruct_trajectory([triplet([1], [2]), broken_last])
        assert len(result.transitions) == 1
        assert result.transitions[0].episode_done
        assert result.rejections[0].reason is RejectionReason.EMPTY_TOKEN_IDS
        assert result.transitions[0].reward == 1.0, "the dropped turn's reward stays in the return"

    def test_wrong_logprob_count_is_rejected_not_none(self) -> None:
        raw = RawTriplet(
            prompt={"token_ids": [1]}, response={"token_ids": [2, 3], "logprobs": [{"logprob": -1.0}]}, reward=0.0
        )
        result = reconstruct_trajectory([raw])
        assert result.is_empty
        assert result.rejections[0].reason is RejectionReason.LOGPROB_COUNT_MISMATCH

    def test_no_token_ids_and_no_logprobs_have_their_own_reasons(self) -> None:
        no_ids = RawTriplet(prompt={"raw_content": "hi"}, response={"token_ids": [1]}, reward=None)
        no_lp = RawTriplet(prompt={"token_ids": [1]}, response={"token_ids": [2]}, reward=None)
        result = reconstruct_trajectory([no_ids, no_lp])
        assert [r.reason for r in result.rejections] == [RejectionReason.NO_TOKEN_IDS, RejectionReason.LOGPROBS_MISSING]

    def test_openai_choice_logprobs_shape_is_accepted(self) -> None:
        raw = RawTriplet(
            prompt={"token_ids": [1]},
            response={"token_ids": [2], "logprobs": {"content": [{"token": "a", "logprob": -0.1}]}},
            reward=1,
        )
        assert reconstruct_trajectory([raw]).transitions[0].logprobs == (-0.1,)

    def test_non_finite_reward_is_rejected(self) -> None:
        result = reconstruct_trajectory([triplet([1], [2], reward=math.nan)])
        assert result.rejections[0].reason is RejectionReason.NON_FINITE_REWARD
        assert result.final_reward_missing

    def test_no_triplets_is_an_empty_flagged_trajectory(self) -> None:
        result = reconstruct_trajectory([])
        assert result.is_empty and result.final_reward_missing and result.n_triplets == 0


@given(good_triplet(), st.integers(min_value=1, max_value=60_000))
def test_ids_beyond_the_policys_vocabulary_are_rejected_and_counted(triplet: RawTriplet, vocab_size: int) -> None:
    result = reconstruct_trajectory([triplet], vocab_size=vocab_size)
    ids = [*triplet.prompt["token_ids"], *triplet.response["token_ids"]]  # type: ignore[index]
    if max(ids) >= vocab_size:
        assert not result.transitions
        assert [r.reason for r in result.rejections] == [RejectionReason.TOKEN_OUT_OF_VOCAB]
    else:
        assert len(result.transitions) == 1 and not result.rejections


def versioned(version: object, *, metadata: bool = True) -> RawTriplet:
    base = triplet([1], [2], reward=1.0)
    return RawTriplet(base.prompt, base.response, base.reward, {"policy_version": version} if metadata else None)


class TestPolicyVersion:
    @given(st.lists(st.one_of(st.none(), st.integers(min_value=0, max_value=10**6)), max_size=8))
    def test_each_transition_keeps_its_version_and_the_oldest_is_the_min(self, versions: list[int | None]) -> None:
        result = reconstruct_trajectory([versioned(v) for v in versions])
        assert [t.policy_version for t in result.transitions] == versions
        known = [v for v in versions if v is not None]
        assert result.oldest_policy_version == (min(known) if known else None)

    @given(st.lists(any_triplet, max_size=8))
    def test_triplets_without_metadata_have_no_version(self, triplets: list[RawTriplet]) -> None:
        result = reconstruct_trajectory(triplets)
        assert all(t.policy_version is None for t in result.transitions)
        assert result.oldest_policy_version is None

    @given(st.one_of(st.integers(max_value=-1), st.floats(), st.text(), st.booleans(), st.lists(st.integers())))
    def test_a_malformed_version_is_unknown_and_the_turn_is_still_kept(self, version: object) -> None:
        result = reconstruct_trajectory([versioned(version)])
        assert len(result.transitions) == 1 and not result.rejections
        assert result.transitions[0].policy_version is None

    def test_rejected_turns_do_not_count_towards_the_oldest_version(self) -> None:
        broken = RawTriplet({"token_ids": [1]}, {"token_ids": []}, None, {"policy_version": 0})
        result = reconstruct_trajectory([broken, versioned(3), versioned(None, metadata=False)])
        assert [t.policy_version for t in result.transitions] == [3, None]
        assert result.oldest_policy_version == 3

    def test_metadata_that_is_not_a_mapping_is_ignored(self) -> None:
        raw = RawTriplet({"token_ids": [1]}, {"token_ids": [2], "logprobs": [-0.1]}, None, ["policy_version", 4])
        assert parse_triplet(0, raw).unwrap().policy_version is None
